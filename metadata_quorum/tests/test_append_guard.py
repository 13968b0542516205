"""AppendGuard: pysyncobj truncates a follower's log back to any AppendEntries' prevLogIdx;
the guard rewrites a stale one so that only Raft's truncation (at a conflict) remains."""

from metadata_quorum.quorum.append_guard import AppendGuard


def guard(terms, first=1, term=2, commit=0):
    """A follower whose log holds entries first.. with these terms, at `term`."""
    journal = [(b"c%d" % (first + i), first + i, t) for i, t in enumerate(terms)]
    return AppendGuard(journal, lambda: (False, term, commit)), journal


def ae(prev, prev_term, entries, term=2, commit=0):
    return {"type": "append_entries", "term": term, "commit_index": commit,
            "prevLogIdx": prev, "prevLogTerm": prev_term,
            "entries": [(b"c%d" % i, i, t) for i, t in entries]}


def test_a_resend_of_held_entries_no_longer_cuts_the_committed_tail():
    g, _ = guard([1, 2, 2, 2, 2, 2], commit=6)            # 1..6 held, all committed
    out = g.admit(ae(3, 2, [(4, 2)]))                       # stale: the leader resends 4
    assert (out["prevLogIdx"], out["prevLogTerm"], out["entries"]) == (6, 2, [])
    assert g.rewritten == 1


def test_a_resend_keeps_what_this_leader_confirmed_beyond_the_commit_index():
    g, journal = guard([1, 2, 2, 2, 2], commit=3)
    msg = ae(5, 2, [(6, 2)])
    assert g.admit(msg) is msg                              # in order: nothing to change
    journal.append((b"c6", 6, 2))                           # pysyncobj appends it
    out = g.admit(ae(3, 2, [(4, 2)]))                       # then a stale resend of 4
    assert out["prevLogIdx"] == 6 and out["entries"] == []


def test_an_old_terms_uncommitted_tail_is_left_to_pysyncobj():
    # 4..6 are term 1 entries no leader of term 2 confirmed, and uncommitted: they may conflict
    # with the new leader's log, so they are not claimed (pysyncobj drops them, as before)
    g, _ = guard([1, 1, 1, 1, 1, 1], commit=2)
    out = g.admit(ae(2, 1, [(3, 1)]))
    assert out["prevLogIdx"] == 3 and out["entries"] == []


def test_held_entries_are_skipped_and_new_ones_appended_after_the_last_held():
    g, _ = guard([1, 2, 2, 2])
    out = g.admit(ae(2, 2, [(3, 2), (4, 2), (5, 2), (6, 2)]))
    assert out["prevLogIdx"] == 4 and out["prevLogTerm"] == 2
    assert [e[1] for e in out["entries"]] == [5, 6]


def test_a_conflict_is_passed_on_unchanged():
    g, _ = guard([1, 2, 2, 2])
    msg = ae(2, 2, [(3, 2), (4, 3)])                        # entry 4 has another term
    assert g.admit(msg) is msg and g.rewritten == 0


def test_a_gap_or_a_mismatched_prev_or_an_old_term_is_passed_on_unchanged():
    g, _ = guard([1, 2, 2], term=3)
    for msg in (ae(5, 2, [(6, 3)], term=3),                 # prev beyond our log: reset
                ae(2, 1, [(3, 3)], term=3),                 # prev's term differs: reset
                ae(1, 1, [(2, 2)], term=2)):                # a deposed leader's: ignored
        assert g.admit(msg) is msg
    assert g.rewritten == 0


def test_heartbeats_in_order_and_other_messages_pass_untouched():
    g, _ = guard([1, 2, 2])
    hb = ae(3, 2, [])
    assert g.admit(hb) is hb
    for msg in ({"type": "request_vote", "term": 3}, {"type": "append_entries", "term": 2,
                "serialized": b"x"}, None, "not a dict"):
        assert g.admit(msg) is msg


def test_a_stale_heartbeat_is_moved_to_the_end_of_what_is_known_to_match():
    g, _ = guard([1, 2, 2, 2, 2], commit=5)
    out = g.admit(ae(2, 2, []))
    assert out["prevLogIdx"] == 5 and out["prevLogTerm"] == 2


def test_a_compacted_log_starting_later_is_indexed_by_its_first_entry():
    g, _ = guard([4, 4, 4, 4], first=100, term=4, commit=103)
    out = g.admit(ae(101, 4, [(102, 4)], term=4))
    assert out["prevLogIdx"] == 103
    below = ae(50, 4, [(51, 4)], term=4)                     # before the first entry: reset
    assert g.admit(below) is below


def test_confirmation_is_per_leader_term():
    g, journal = guard([1, 2, 2, 2, 2, 2], term=2, commit=2)
    g.admit(ae(6, 2, []))                                    # term 2 leader confirms up to 6
    g.raft_state = lambda: (False, 3, 2)                     # a new leader at term 3
    out = g.admit(ae(2, 2, [(3, 2)], term=3))
    assert out["prevLogIdx"] == 3                            # 4..6 unconfirmed by term 3
