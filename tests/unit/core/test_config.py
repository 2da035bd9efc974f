from __future__ import annotations

from pathlib import Path

import pytest

from rayfleet.core.config import ConfigError, load_config, parse_overrides
from rayfleet.train.ddp.config import DDPConfig

DDP_YAML = Path("rayfleet/train/configs/ddp.yaml")


def load(data_dir: Path, *overrides: str, path: Path | None = DDP_YAML) -> DDPConfig:
    return load_config(DDPConfig, path, [f"data_dir={data_dir}", *overrides])


def test_yaml_defaults_equal_the_blueprint(small_dataset):
    cfg = load(small_dataset)
    assert (cfg.lr, cfg.batch_size, cfg.epochs, cfg.num_workers) == (1e-3, 128, 10, 2)
    assert Path(cfg.data_dir).is_absolute() and Path(cfg.storage).is_absolute()


def test_overrides_are_typed_yaml_scalars():
    assert parse_overrides(["lr=1e-3", "epochs=3", "compile=true", "run_name=null", "a.b=x"]) == {
        "lr": 1e-3,
        "epochs": 3,
        "compile": True,
        "run_name": None,
        "a": {"b": "x"},
    }


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("bogus=1", "bogus: unknown key"),
        ("epochs=ten", "epochs: Input should be a valid integer (got 'ten')"),
        ("epochs=2.5", "epochs: Input should be a valid integer"),
        ("lr=-0.1", "lr: Input should be greater than 0"),
        ("lr=0", "lr: Input should be greater than 0"),
        ("batch_size=0", "batch_size: Input should be greater than or equal to 1"),
        ("num_workers=0", "num_workers: Input should be greater than or equal to 1"),
        ("cpus_per_worker=-1", "cpus_per_worker: Input should be greater than 0"),
        ("device=tpu", "device: Input should be 'auto', 'cpu' or 'cuda'"),
        ("precision=fp8", "precision: Input should be 'auto', 'bf16' or 'fp32'"),
        ("storage=gs://bucket", "storage: only local paths and s3:// are supported"),
        ("run_name=../escape", "run_name: String should match pattern"),
        ("compile=yes please", "compile: Input should be a valid boolean"),
        ("max_failures=-2", "max_failures: Input should be greater than or equal to -1"),
    ],
)
def test_rejects_bad_values_naming_the_key(small_dataset, override, expected):
    with pytest.raises(ConfigError) as err:
        load(small_dataset, override)
    assert expected in str(err.value)


def test_reports_every_bad_key_at_once(small_dataset):
    with pytest.raises(ConfigError) as err:
        load(small_dataset, "lr=-1", "epochs=x", "nope=1")
    text = str(err.value)
    assert "lr:" in text and "epochs:" in text and "nope: unknown key" in text


def test_missing_data_dir_names_the_key_and_the_fix(tmp_path):
    with pytest.raises(ConfigError) as err:
        load(tmp_path / "absent")
    assert "data_dir:" in str(err.value) and "make data" in str(err.value)


def test_missing_data_is_fine_when_downloading(tmp_path):
    assert load(tmp_path / "cache", "download=true").download is True


def test_endpoint_needs_s3_storage(small_dataset):
    with pytest.raises(ConfigError, match="s3_endpoint_url: only meaningful with an s3:// storage"):
        load(small_dataset, "s3_endpoint_url=http://127.0.0.1:9000")
    with pytest.raises(ConfigError, match="s3_endpoint_url: must start with http"):
        load(small_dataset, "storage=s3://b/p", "s3_endpoint_url=127.0.0.1:9000")
    cfg = load(small_dataset, "storage=s3://b/p/", "s3_endpoint_url=http://127.0.0.1:9000")
    assert cfg.storage == "s3://b/p"


def test_bad_override_syntax_and_files(small_dataset, tmp_path):
    with pytest.raises(ConfigError, match="is not key=value"):
        load(small_dataset, "epochs")
    with pytest.raises(ConfigError, match="does not exist"):
        load(small_dataset, path=tmp_path / "none.yaml")
    listing = tmp_path / "list.yaml"
    listing.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load(small_dataset, path=listing)


def test_resolved_config_round_trips_through_yaml(small_dataset, tmp_path):
    cfg = load(small_dataset, "epochs=3", "lr=0.002")
    written = tmp_path / "config.yaml"
    written.write_text(cfg.to_yaml())
    assert load_config(DDPConfig, written) == cfg


def test_a_config_file_that_is_not_yaml_utf8_or_says_a_key_twice_is_one_line(small_dataset, tmp_path):
    """Issue 54 R8, R10: the job configs load through the same reader as recipes."""
    bad = tmp_path / "bad.yaml"
    for body, expected in (
        (b"epochs: 1\nepochs: 3\n", "is not valid YAML: key 'epochs' appears twice (line 2, column 1)"),
        (b"epochs: [1\n", "is not valid YAML: "),
        (b"epochs: 1 # caf\xe9\n", "is not UTF-8 text (byte 15: 0xe9)"),
    ):
        bad.write_bytes(body)
        with pytest.raises(ConfigError) as err:
            load(small_dataset, path=bad)
        assert str(err.value).startswith(f"config file {bad} ") and expected in str(err.value)
        assert "\n" not in str(err.value)


def test_no_config_number_is_infinite_or_nan(small_dataset):
    for value in (".inf", "-.inf", ".nan"):
        with pytest.raises(ConfigError, match="lr: Input should be a finite number"):
            load(small_dataset, f"lr={value}")
