# Run as root by `make setup` after the Debian packages: Debian's etcd-server enables a member
# on localhost, and the harness runs its own members.
if [ -d /run/systemd/system ]; then systemctl disable --now etcd >/dev/null 2>&1 || true; fi
