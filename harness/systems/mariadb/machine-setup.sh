# Run as root by `make setup` after the Debian packages: Debian's mariadb-server enables a server
# on localhost, and the harness runs its own servers, one per host.
if [ -d /run/systemd/system ]; then systemctl disable --now mariadb >/dev/null 2>&1 || true; fi
