"""quorum/pre_vote.py: who grants a pre-vote, and when a round is won."""

import pytest

from metadata_quorum.quorum.pre_vote import PRE_VOTE, PreVoteRound, should_grant

BASE = dict(is_leader=False, heard_from_leader_s=None, min_timeout_s=0.4, proposed_term=6,
            current_term=5, candidate_log=(5, 100), own_log=(5, 100))


def test_a_voter_without_a_leader_grants_an_up_to_date_candidate():
    assert should_grant(**BASE)
    assert should_grant(**BASE | dict(heard_from_leader_s=0.4))
    assert should_grant(**BASE | dict(candidate_log=(6, 1)))      # a later term beats length


@pytest.mark.parametrize("change", [
    dict(is_leader=True),                           # the leader is alive by answering
    dict(heard_from_leader_s=0.39),                 # heard from one within the minimum timeout
    dict(candidate_log=(5, 99)),                    # the candidate misses entries
    dict(candidate_log=(4, 500)),                   # ... or has an older last term
    dict(proposed_term=4),                          # it is behind this voter's term
], ids=["leader", "recent-leader", "shorter-log", "older-log-term", "stale-term"])
def test_a_voter_refuses(change):
    assert not should_grant(**BASE | change)


def test_a_round_is_won_with_a_majority_counting_itself():
    r = PreVoteRound()
    msg = r.start(current_term=5, voters=3)
    assert msg == {"type": PRE_VOTE, "term": 6}
    assert not r.may_elect(5)
    assert not r.on_response("b", 6, False)
    assert r.on_response("c", 6, True)              # itself + c = 2 of 3
    assert not r.on_response("b", 6, True)          # already won: reported once
    assert r.may_elect(5)
    assert not r.may_elect(5)                       # consumed by the election it allowed


def test_five_voters_need_two_others_and_answers_count_once_per_voter():
    r = PreVoteRound()
    r.start(current_term=1, voters=5)
    assert not r.on_response("b", 2, True)
    assert not r.on_response("b", 2, True)
    assert r.on_response("c", 2, True)


def test_answers_for_another_round_or_a_moved_term_do_not_count():
    r = PreVoteRound()
    r.start(current_term=5, voters=3)
    assert not r.on_response("b", 5, True)          # an older round's answer
    r.start(current_term=7, voters=3)               # the term moved on meanwhile
    assert not r.on_response("b", 6, True)
    assert r.on_response("b", 8, True)
    assert not r.may_elect(5)                       # won for term 8, not for 6
    assert r.may_elect(7)


def test_one_voter_wins_at_once():
    r = PreVoteRound()
    r.start(current_term=0, voters=1)
    assert r.may_elect(0)
