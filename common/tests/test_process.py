"""common.process: what both node entry points share."""


def test_open_file_limit_is_raised_as_far_as_allowed_and_never_lowered():
    import resource

    from common.process import raise_open_file_limit
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    got = raise_open_file_limit()
    now_soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert got == now_soft >= soft
    assert now_soft >= min(hard, 1 << 20) or hard == resource.RLIM_INFINITY
