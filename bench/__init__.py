"""qcore's benchmarks: every qcore figure next to a raw psycopg baseline measured on the
same server in the same invocation (``python -m bench run --help``)."""
