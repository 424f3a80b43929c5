"""MHSAConfig: one test per validation rule (the message names the parameter), and round trips."""
import math

import pytest

from attnspec import ConfigError, MHSAConfig


def base(**kw):
    args = dict(seq_len=64, d_model=128, d_qk=(32, 32, 32, 32), d_v=(32, 32, 32, 32), d_out=128)
    args.update(kw)
    return MHSAConfig(**args)


@pytest.mark.parametrize("kw, parameter", [
    (dict(seq_len=0), "seq_len"),
    (dict(seq_len=1), "seq_len"),
    (dict(seq_len=64.0), "seq_len"),
    (dict(d_model=0), "d_model"),
    (dict(d_model=-5), "d_model"),
    (dict(d_out=0), "d_out"),
    (dict(d_qk=(32, 0, 32, 32)), "d_qk"),
    (dict(d_qk=()), "d_qk"),
    (dict(d_qk=(32, 32.5, 32, 32)), "d_qk"),
    (dict(d_v=(32, 32, 32)), "d_v"),
    (dict(d_v=(32, -1, 32, 32)), "d_v"),
    (dict(seq_len=200), "seq_len"),  # l > d with orthonormal inputs
    (dict(beta=math.nan), "beta"),
    (dict(beta=math.inf), "beta"),
    (dict(beta=-0.5), "beta"),
    (dict(beta=26.0), "beta"),
    (dict(beta="1"), "beta"),
    (dict(inputs="uniform"), "inputs"),
    (dict(values="shared"), "values"),
    (dict(target="scores"), "target"),
    (dict(centering="none"), "centering"),
    (dict(key_groups=3), "key_groups"),
    (dict(key_groups=0), "key_groups"),
    (dict(key_groups=8), "key_groups"),
    (dict(value_groups=3), "value_groups"),
    (dict(d_qk=(32, 16, 32, 32), key_groups=1), "d_qk"),
    (dict(d_v=(32, 16, 32, 32), value_groups=2), "d_v"),
    (dict(values="tied-to-keys", d_v=(16, 16, 16, 16)), "d_v"),
    (dict(values="tied-to-keys", key_groups=2, value_groups=4), "value_groups"),
    (dict(values="key-dependent", key_groups=2, value_groups=1), "value_groups"),
    (dict(values="key-dependent", value_key_scale=0.0), "value_key_scale"),
    (dict(values="key-dependent", value_key_scale=math.nan), "value_key_scale"),
    (dict(value_key_scale=2.0), "value_key_scale"),
    (dict(target="attention"), "target"),  # needs a single head
])
def test_invalid_configuration_names_the_parameter(kw, parameter):
    with pytest.raises(ConfigError) as info:
        base(**kw)
    assert info.value.parameter == parameter
    assert parameter in str(info.value)
    assert repr(kw.get(parameter, info.value.value)) in str(info.value) or parameter in ("d_v", "d_qk")


def test_valid_variants_construct():
    assert base(inputs="gaussian", seq_len=500).seq_len == 500  # l > d allowed with gaussian inputs
    assert base(key_groups=2, value_groups=1).key_group(3) == 1
    assert base(values="tied-to-keys", key_groups=1, value_groups=1).values == "tied-to-keys"
    assert base(values="key-dependent", key_groups=2, value_groups=4, value_key_scale=2.5).value_key_scale == 2.5
    att = MHSAConfig.uniform(100, 100, 1, 100, target="attention")
    assert att.n_heads == 1 and att.gamma == 1.0


def test_uniform_and_ratios():
    c = MHSAConfig.uniform(1000, 1000, heads=4, d_qk=250)
    assert c.d_qk == (250,) * 4 and c.d_v == (250,) * 4 and c.d_out == 1000
    assert c.psi == (0.25,) * 4 and c.omega == 1.0
    r = MHSAConfig.from_ratios(1000, gamma=0.5, psi=(0.25, 0.5), phi=(0.125, 0.375), omega=0.75)
    assert (r.seq_len, r.d_qk, r.d_v, r.d_out) == (500, (250, 500), (125, 375), 750)
    assert math.isclose(c.sigma2, math.e - 1) and math.isclose(c.alpha2, math.e - 2)


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_round_trip(tmp_path, suffix):
    c = base(beta=0.8, key_groups=2, value_groups=4, values="key-dependent", value_key_scale=1.5, inputs="gaussian")
    assert MHSAConfig.load(c.save(tmp_path / f"c{suffix}")) == c
    assert MHSAConfig.from_json(c.to_json()) == c and MHSAConfig.from_toml(c.to_toml()) == c


def test_unknown_key_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="heads_count"):
        MHSAConfig.from_dict(dict(base().to_dict(), heads_count=3))
    with pytest.raises(ConfigError, match="d_out"):
        MHSAConfig.from_dict({k: v for k, v in base().to_dict().items() if k != "d_out"})
    with pytest.raises(FileNotFoundError):
        MHSAConfig.load(tmp_path / "nope.toml")


def test_immutable():
    c = base()
    with pytest.raises(AttributeError):
        c.beta = 2.0
    assert c.replace(beta=2.0).beta == 2.0 and c.beta == 1.0
    with pytest.raises(ConfigError, match="beta"):
        c.replace(beta=-1.0)


def test_beta_functions_are_the_configs_and_name_beta_out_of_range():
    from attnspec.config import BETA_MAX, alpha2_of_beta, alpha_of_beta, sigma2_of_beta

    cfg = MHSAConfig.uniform(8, 8, beta=1.3)
    assert cfg.sigma2 == sigma2_of_beta(1.3) == pytest.approx(math.exp(1.69) - 1)
    assert cfg.alpha2 == alpha2_of_beta(1.3) == pytest.approx(math.exp(1.69) - 1 - 1.69)
    assert alpha_of_beta(1.3) ** 2 == pytest.approx(cfg.alpha2)
    assert alpha2_of_beta(1e-9) >= 0.0
    for bad in (BETA_MAX + 1, float("nan"), float("inf"), "1"):
        with pytest.raises(ConfigError) as err:
            alpha2_of_beta(bad)
        assert err.value.parameter == "beta"


def test_with_heads_keeps_total_widths_and_sharing_that_divides():
    cfg = MHSAConfig.uniform(64, 64, heads=4, key_groups=2)
    two = cfg.with_heads(2)
    assert two.d_qk == (32, 32) and two.d_v == (32, 32) and two.key_groups == 2 and two.value_groups == 2
    eight = cfg.with_heads(8)
    assert sum(eight.d_qk) == sum(cfg.d_qk) and eight.key_groups == 2 and eight.value_groups == 8
    assert cfg.with_heads(1).key_groups == 1
    with pytest.raises(ConfigError) as err:
        cfg.with_heads(3)
    assert err.value.parameter == "heads" and "64" in str(err.value)
    with pytest.raises(ConfigError):
        cfg.with_heads(0)
