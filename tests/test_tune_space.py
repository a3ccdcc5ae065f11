"""`tune.space`: strict loading (incl. dict[str, dataclass] fields), suggestions, trial variants."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from leakpipe.config import (
    ConfigError,
    ModelConfig,
    ParamSpec,
    TrainConfig,
    TuneConfig,
    from_mapping,
    load_section,
)
from leakpipe.tune.space import (
    base_values,
    check_space,
    effective_values,
    make_variant,
    round_significant,
    space_items,
    suggest,
)
from tests.conftest import PARAMS
from tests.helpers_tune import spec


@pytest.fixture(scope="module")
def configs() -> tuple[ModelConfig, TrainConfig, TuneConfig]:
    return (load_section(PARAMS, "model"), load_section(PARAMS, "train"),
            load_section(PARAMS, "tune"))


def _tune_raw() -> dict[str, Any]:
    return yaml.safe_load(PARAMS.read_text())["tune"]


def _load_tune(raw: dict[str, Any]) -> TuneConfig:
    return from_mapping(TuneConfig, raw, "tune", "params.yaml")


# -- loading -------------------------------------------------------------------------------------

def test_default_space_covers_what_the_original_searched(configs) -> None:
    names = {name for name, _ in space_items(configs[2])}
    assert names == {"model.dropout", "train.learning_rate", "train.batch_size",
                     "train.weight_decay", "train.grad_clip", "train.grad_clip_norm",
                     "train.loss", "train.focal_gamma", "train.focal_alpha",
                     "train.leak_aux_weight", "train.leak_weight_boost", "train.warmup_epochs",
                     "train.leak_oversample_factor",
                     "train.input_norm"}      # level-aware or level-free: a tuned choice
    assert configs[2].space.train["input_norm"].choices == ("none", "clip_level")
    assert isinstance(configs[2].space.train["learning_rate"], ParamSpec)
    assert configs[2].space.train["learning_rate"].log is True


@pytest.mark.parametrize(("mutate", "key"), [
    (lambda t: t["space"]["train"].update(bogus=spec("float", low=0.1, high=1.0)),
     "tune.space.train.bogus"),
    (lambda t: t["space"]["train"].update(epochs=spec("int", low=1, high=3)),
     "tune.space.train.epochs"),                                   # the trial budget: fixed
    (lambda t: t["space"]["train"]["learning_rate"].pop("step"),
     "tune.space.train.learning_rate.step"),                        # every key is required
    (lambda t: t["space"]["train"]["learning_rate"].update(colour="red"),
     "tune.space.train.learning_rate.colour"),
    (lambda t: t["space"].update(train=[1, 2]), "tune.space.train"),
    (lambda t: t["space"]["train"].update({"lr": "fast"}), "tune.space.train.lr"),
    (lambda t: t.update(n_trials=0, timeout_s=0), "tune.n_trials"),
    (lambda t: t.update(grace_s=5, heartbeat_s=10), "tune.grace_s"),
    (lambda t: t.update(pruner="asha"), "tune.pruner"),
])
def test_bad_tune_params_name_the_key(mutate, key: str) -> None:
    raw = _tune_raw()
    mutate(raw)
    with pytest.raises(ConfigError, match=rf"^params\.yaml: {key.replace('.', '[.]')}\b"):
        _load_tune(raw)


@pytest.mark.parametrize(("fields", "key"), [
    ({"type": "float", "low": 2.0, "high": 1.0}, "low"),
    ({"type": "float", "low": 0.0, "high": 1.0, "log": True}, "log"),
    ({"type": "float", "low": 1e-3, "high": 1.0, "log": True, "step": 0.1}, "log"),
    ({"type": "float", "low": 0.0, "high": 1.0, "step": -0.1}, "step"),
    ({"type": "float", "low": None, "high": 1.0}, "low"),
    ({"type": "float", "low": 0.0, "high": 1.0, "choices": [1]}, "choices"),
    ({"type": "int", "low": 1, "high": 2.5}, "low"),
    ({"type": "categorical"}, "choices"),
    ({"type": "categorical", "choices": [[1, 2]]}, "choices"),
    ({"type": "categorical", "choices": [1, 2], "low": 0.0}, "low"),
])
def test_param_spec_problems(fields: dict[str, Any], key: str) -> None:
    raw = spec(**{"kind": fields.pop("type"), **fields})
    with pytest.raises(ConfigError, match=rf"^src: p[.]{key}:"):
        from_mapping(ParamSpec, raw, "p", "src")


def test_a_valid_spec_loads_with_its_types() -> None:
    loaded = from_mapping(ParamSpec, spec("categorical", choices=[512, 1024]), "p", "src")
    assert loaded.choices == (512, 1024) and loaded.low is None


@pytest.mark.parametrize(("name", "entry", "bad"), [
    ("loss", spec("categorical", choices=["ce", "hinge"]), "'hinge'"),
    ("batch_size", spec("categorical", choices=[512, 0]), "0"),
    ("batch_size", spec("categorical", choices=[512.0]), "512.0"),
    ("learning_rate", spec("float", low=1e-6, high=1e-2, log=True), "1e-06"),  # < eta_min
    ("warmup_epochs", spec("float", low=0.0, high=5.0), "5.0"),               # > trial epochs
])
def test_check_space_rejects_values_the_section_rejects(configs, name, entry, bad) -> None:
    model, train, cfg = configs
    space = dataclasses.replace(cfg.space, train={name: from_mapping(ParamSpec, entry, "p")})
    with pytest.raises(ConfigError, match=rf"^params.yaml: tune.space.train.{name}: {bad} "):
        check_space(model, train, dataclasses.replace(cfg, space=space), "params.yaml")


def test_check_space_accepts_the_default_space(configs) -> None:
    check_space(*configs, "params.yaml")


# -- suggestions and variants ---------------------------------------------------------------------

def _fixed(params: dict[str, Any]) -> optuna.trial.FixedTrial:
    return optuna.trial.FixedTrial(params)


DEFAULT_PICK = {"model.dropout": 0.2, "train.learning_rate": 0.002, "train.batch_size": 512,
                "train.weight_decay": 0.01, "train.grad_clip": False, "train.loss": "ce",
                "train.leak_weight_boost": 2.0, "train.leak_aux_weight": 0.5,
                "train.warmup_epochs": 0.5, "train.leak_oversample_factor": 2,
                "train.input_norm": "clip_level"}


def test_conditional_parameters_are_asked_only_when_they_matter(configs) -> None:
    model, train, cfg = configs
    chosen = suggest(_fixed(DEFAULT_PICK), cfg, base_values(model, train))
    assert chosen == DEFAULT_PICK   # no focal_* (loss ce), no grad_clip_norm (clip off)
    focal = {k: v for k, v in DEFAULT_PICK.items() if k != "train.leak_weight_boost"}
    focal.update({"train.loss": "focal", "train.focal_gamma": 2.5, "train.focal_alpha": 0.3,
                  "train.grad_clip": True, "train.grad_clip_norm": 2.0})
    assert suggest(_fixed(focal), cfg, base_values(model, train)) == focal


def test_a_conditional_parameter_follows_the_base_when_its_parent_is_not_searched(configs):
    model, train, cfg = configs
    space = dataclasses.replace(cfg.space, model={},
                                train={"focal_gamma": cfg.space.train["focal_gamma"]})
    cfg = dataclasses.replace(cfg, space=space)
    assert suggest(_fixed({}), cfg, base_values(model, train)) == {}  # base loss is ce
    focal_base = dataclasses.replace(train, loss="focal")
    picked = suggest(_fixed({"train.focal_gamma": 1.5}), cfg, base_values(model, focal_base))
    assert picked == {"train.focal_gamma": 1.5}


@pytest.mark.parametrize(("value", "rounded"), [
    (0.0012345678, 0.001235), (123.456789, 123.5), (0.0, 0.0), (-2.71828, -2.718),
    (1.0e-5, 1.0e-5)])
def test_round_significant(value: float, rounded: float) -> None:
    assert round_significant(value) == rounded


@pytest.mark.parametrize(("batch", "reference", "lr"), [
    (512, 1024, 0.002 * math.sqrt(0.5)), (4096, 1024, 0.004), (512, 0, 0.002)])
def test_learning_rate_scales_with_sqrt_batch(configs, batch, reference, lr) -> None:
    model, train, cfg = configs
    cfg = dataclasses.replace(cfg, lr_batch_reference=reference)
    values = effective_values({"train.learning_rate": 0.002, "train.batch_size": batch}, cfg,
                              base_values(model, train))
    assert values["train.learning_rate"] == round_significant(lr)


def test_variant_trains_with_the_values_and_the_trial_budget(configs) -> None:
    model, train, cfg = configs
    cfg = dataclasses.replace(cfg, lr_batch_reference=1024)
    variant = make_variant(model, train, cfg, DEFAULT_PICK, source="trial 7")
    assert variant.train.epochs == cfg.epochs and variant.train.compile is cfg.compile
    assert variant.model.dropout == 0.2 and variant.train.batch_size == 512
    assert variant.train.learning_rate == round_significant(0.002 * math.sqrt(512 / 1024))
    assert variant.by_section()["train"]["learning_rate"] == variant.train.learning_rate
    assert variant.train.seed == train.seed   # trials are comparable: one seed


def test_variant_the_train_stage_would_reject_fails_naming_the_trial(configs) -> None:
    model, train, cfg = configs
    cfg = dataclasses.replace(cfg, lr_batch_reference=1024)
    pick = {"train.learning_rate": 2.0e-5, "train.batch_size": 64}   # scaled: 5e-6 < eta_min
    with pytest.raises(ConfigError, match=r"^trial 7: train.eta_min: must not exceed"):
        make_variant(model, train, cfg, pick, source="trial 7")


def test_repo_params_stay_loadable(tmp_path: Path) -> None:
    # the tune section is one of the repo's sections; a copy without it is rejected by tune only
    raw = yaml.safe_load(PARAMS.read_text())
    del raw["tune"]
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw))
    load_section(path, "train")
    with pytest.raises(ConfigError, match=r"tune: section missing"):
        load_section(path, "tune")
