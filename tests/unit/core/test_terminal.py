from rayfleet.core.terminal import printable


def test_escape_sequences_and_newlines_never_reach_the_terminal():
    assert printable("run\x1b]0;pwned\x07-1\nrow") == "run?]0;pwned?-1?row"
    assert printable("\x9b31m") == "?31m"  # C1 CSI
    assert printable("ddp-20261204 ok") == "ddp-20261204 ok"
    assert printable(3) == "3"


def test_unicode_that_reorders_or_hides_text_is_shown_too():
    assert printable("run\u202eexe.txt") == "run?exe.txt"  # right-to-left override
    assert printable("a\u2066b\u2069c\u200bd\u2028e") == "a?b?c?d?e"
    assert printable("café-ünïcode 训练") == "café-ünïcode 训练"
