"""The verification campaign (issue 20 item 3): seeded random nemesis schedules against a live
cluster, every checker over each round's history, failing schedules shrunk, a JSON + HTML
report. `python -m chaos_tests.campaign --help`."""
