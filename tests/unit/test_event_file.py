"""rlpar's TensorBoard event file: written from the caller's thread, read back by TensorBoard."""

import threading

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.compat.proto.summary_pb2 import Summary

from rlpar.logging.event_file import EventFile


def scalars(values: dict[str, float]) -> Summary:
    return Summary(value=[Summary.Value(tag=tag, simple_value=value) for tag, value in values.items()])


def read_back(log_dir) -> EventAccumulator:
    events = EventAccumulator(str(log_dir))
    events.Reload()
    return events


def test_events_reach_the_file_at_flush_times_and_tensorboard_reads_them_back(tmp_path):
    threads = threading.active_count()
    events = EventFile(tmp_path, flush_secs=3600)
    assert threading.active_count() == threads, "a writer thread was started"
    for step in range(1, 4):
        events.add_summary(scalars({"a/x": step * 0.5, "a/y": -step}), global_step=step * 100)
    assert events.path.stat().st_size < 100, "events reached the file before a flush"  # the header event only
    events.close()
    back = read_back(tmp_path)
    assert sorted(back.Tags()["scalars"]) == ["a/x", "a/y"]
    assert [(e.step, e.value) for e in back.Scalars("a/x")] == [(100, 0.5), (200, 1.0), (300, 1.5)]
    assert [e.value for e in back.Scalars("a/y")] == [-1.0, -2.0, -3.0]


def test_flush_secs_bounds_how_long_an_event_waits(tmp_path):
    events = EventFile(tmp_path, flush_secs=0.0)
    events.add_summary(scalars({"a/x": 7.0}), global_step=1)
    assert [e.value for e in read_back(tmp_path).Scalars("a/x")] == [7.0]  # before close


def test_two_files_of_one_second_have_two_names(tmp_path):
    first, second = EventFile(tmp_path), EventFile(tmp_path)
    assert first.path != second.path and {p.name for p in tmp_path.iterdir()} == {first.path.name, second.path.name}


def test_a_write_the_disk_cannot_take_raises_in_the_flushing_call(tmp_path):
    events = EventFile(tmp_path, flush_secs=3600)
    events.path.unlink()
    events.path.symlink_to("/dev/full")
    events.add_summary(scalars({"a/x": 1.0}), global_step=1)  # held in memory
    with pytest.raises(OSError, match="No space left"):
        events.flush()
