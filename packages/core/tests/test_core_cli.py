from conveyor.cli import main


def test_stages_lists_order_and_distribution(capsys):
    assert main(["stages"]) == 0
    out = capsys.readouterr().out
    assert "eager" in out and "conveyor-core" in out and "pipeline:" in out
    assert "declared" in out and "eager: nothing" in out


def test_unknown_backend_is_a_readable_error(capsys):
    assert main(["stages", "--backend", "nope"]) == 2
    assert "unknown backend 'nope'" in capsys.readouterr().err


def test_demo_trains_and_matches(capsys):
    assert main(["demo", "--steps", "2"]) == 0
    out = capsys.readouterr().out
    assert "OK: largest loss difference" in out and "per-stage report" in out
