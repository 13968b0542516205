"""Chaos tests: deterministic simulation (`sim/`), real processes with faults (`live/`), and the
history checkers both share (`checkers/`). See chaos_tests/README.md.

Layer: the top (test support): may use anything; nothing else imports it.
"""
