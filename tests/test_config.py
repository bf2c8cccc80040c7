"""LoaderConfig's per-topic values (mploader/config.py)."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from mploader.config import NO_REMOTE_STORAGE_TOPICS, EffectiveConfig, LoaderConfig, TopicConfig


def _fresh(cfg: LoaderConfig, topic: str) -> EffectiveConfig:
    """for_topic's values made anew, without the one cached for topics without overrides."""
    return cfg._effective(cfg.topic_overrides.get(topic) or TopicConfig(), topic)


@pytest.mark.parametrize("remote", [False, True])
def test_a_topic_without_overrides_gets_the_values_made_for_it(remote: bool) -> None:
    """The values of a topic without overrides are made once and cached (they do not depend on its name: remote
    storage needs a topic's own remote.storage.enable); a topic with overrides, a copy, a replaced config get
    theirs."""
    overrides = {"t": TopicConfig(index_interval_bytes=100, remote_storage_enable=True), "u": TopicConfig()}
    cfg = LoaderConfig(index_interval_bytes=8192, remote_log_storage_system_enable=remote, topic_overrides=overrides)
    topics = ["t", "u", "plain", *sorted(NO_REMOTE_STORAGE_TOPICS)]
    for c in (cfg, pickle.loads(pickle.dumps(cfg)), cfg.replace(segment_bytes=1 << 20)):
        assert [c.for_topic(t) for t in topics] == [_fresh(c, t) for t in topics]
    assert cfg.for_topic("t").remote_storage is remote and cfg.for_topic("t").index_interval_bytes == 100
    assert cfg.replace(segment_bytes=1 << 20).for_topic("plain").segment_bytes == 1 << 20
    assert cfg == dataclasses.replace(cfg) and "_plain" not in repr(cfg)


def test_the_scan_workers_field_is_also_read_and_given_by_its_former_name() -> None:
    """``segment_scan_workers_per_data_dir`` was ``num_segment_loading_threads_per_data_dir`` (they are worker
    processes, not threads): the former name still works in the constructor, ``replace()`` and as an attribute,
    each time with a DeprecationWarning, and means the same field."""
    old = "num_segment_loading_threads_per_data_dir"
    with pytest.warns(DeprecationWarning, match="segment_scan_workers_per_data_dir"):
        cfg = LoaderConfig(**{old: 3})
    assert cfg == LoaderConfig(segment_scan_workers_per_data_dir=3)
    with pytest.warns(DeprecationWarning, match="segment_scan_workers_per_data_dir"):
        assert getattr(cfg, old) == 3
    with pytest.warns(DeprecationWarning):
        assert cfg.replace(**{old: "adaptive"}).segment_scan_workers_per_data_dir == "adaptive"
    assert cfg.replace(segment_scan_workers_per_data_dir=1) == LoaderConfig(segment_scan_workers_per_data_dir=1)
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="segment_scan_workers_per_data_dir"):
        LoaderConfig(**{old: 0})
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError, match="same field"):
        LoaderConfig(**{old: 2, "segment_scan_workers_per_data_dir": 2})
    assert old not in repr(cfg) and [f.name for f in dataclasses.fields(cfg)].count(old) == 0


def test_a_config_warns_of_nothing_under_its_current_names(recwarn: pytest.WarningsRecorder) -> None:
    cfg = LoaderConfig(segment_scan_workers_per_data_dir=2).replace(dry_run=True)
    assert cfg.segment_scan_workers_per_data_dir == 2 and pickle.loads(pickle.dumps(cfg)) == cfg
    assert not recwarn.list
