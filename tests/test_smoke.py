"""The package imports and the CLI answers."""

from tensorledger.napkin import training_flops


def test_training_flops_is_six_n_d() -> None:
    assert training_flops(70e9, 15e12) == 6 * 70e9 * 15e12  # 6.3e24
