"""Whether a trial fuses, and a new pack's cap (core.fusing)."""
import pytest

from hypersack.core.fusing import PACK_HEADROOM, pack_cap, runs_fused
from hypersack.errors import ConfigError


def test_the_execution_mode_decides_and_auto_asks_the_task_only_then():
    asked = []

    def accepts(answer):
        def ask():
            asked.append(answer)
            return answer
        return ask
    assert runs_fused("fused", accepts(False)) is True
    assert runs_fused("separate", accepts(True)) is False
    assert asked == []
    assert runs_fused("auto", accepts(True)) is True
    assert runs_fused("auto", accepts(False)) is False
    assert asked == [True, False]
    with pytest.raises(ConfigError, match="execution"):
        runs_fused("both", accepts(True))


@pytest.mark.parametrize("mode", ["fused", "auto"])
def test_a_trial_alone_in_its_algorithm_pack_runs_as_a_plain_trial(mode):
    assert runs_fused(mode, lambda: True, pack_size=1) is False
    assert runs_fused(mode, lambda: True, pack_size=2) is True
    assert runs_fused(mode, lambda: True, pack_size=None) is True     # no algorithm packs


def test_a_pack_takes_what_fits_the_headroom_of_the_free_memory():
    assert PACK_HEADROOM == 0.9
    assert pack_cap(16, 100.0, 9.0) == 10                # floor(90 / 9)
    assert pack_cap(16, 100.0, 8.0, base=18.0) == 9      # floor((90 - 18) / 8)
    assert pack_cap(4, 100.0, 9.0) == 4                  # max_members first
    assert pack_cap(16, 10.0, 9.5) == 1                  # one member always (placement's question)
    assert pack_cap(16, -5.0, 1.0) == 1


def test_nothing_measured_leaves_max_members():
    assert pack_cap(8, None, None) == 8
    assert pack_cap(8, 100.0, None) == 8
    with pytest.raises(ConfigError, match="pack.max_members"):
        pack_cap(0, None, None)
