"""Judging histories: checkers, the Spark analysis job, and HTML reports."""
