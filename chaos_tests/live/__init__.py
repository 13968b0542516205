"""Live chaos: real controller and broker processes on 127.0.0.1, faults from a named table
(`faults.FAULTS`), a TCP fault proxy between nodes (`proxy`), workloads that record histories
for `chaos_tests.checkers`."""
