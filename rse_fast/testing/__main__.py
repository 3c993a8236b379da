"""``python -m rse_fast.testing --port 0 --latency 0``: run the scripted server until killed."""

from rse_fast.testing.server import main

main()
