"""Evaluation videos on the dashboards: an animated GIF in TensorBoard (its Images tab plays it),
the MP4 itself in W&B.

TensorBoard's `add_video` needs MoviePy 1's `moviepy.editor`, gone in MoviePy 2, so the GIF is
encoded here with Pillow and written as the image summary `add_video` would write.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np

MAX_GIF_FRAMES = 200  # longer videos are subsampled in time
MAX_GIF_WIDTH = 320  # and scaled down: a TensorBoard event stays a few MB at most


def read_video(path: str | Path) -> tuple[list[np.ndarray], float]:
    """The frames of a video file (RGB, uint8) and its frames per second, read with ffmpeg."""
    import imageio.v2 as imageio

    reader: Any = imageio.get_reader(str(path), format="FFMPEG")  # an ffmpeg reader: frames by iteration
    try:
        fps = float(reader.get_meta_data().get("fps") or 30.0)
        frames = [np.asarray(frame) for frame in reader]
    finally:
        reader.close()
    return frames, fps


def gif_bytes(frames: list[np.ndarray], fps: float) -> tuple[bytes, int, int]:
    """An animated GIF of `frames` (subsampled, scaled down) and its height and width."""
    from PIL import Image

    stride = max(1, -(-len(frames) // MAX_GIF_FRAMES))
    images = [Image.fromarray(np.asarray(frame, np.uint8)[..., :3]) for frame in frames[::stride]]
    width, height = images[0].size
    if width > MAX_GIF_WIDTH:
        height, width = max(1, round(height * MAX_GIF_WIDTH / width)), MAX_GIF_WIDTH
        images = [image.resize((width, height), Image.Resampling.BILINEAR) for image in images]
    buffer = io.BytesIO()
    images[0].save(
        buffer,
        format="GIF",
        save_all=True,
        append_images=images[1:],
        loop=0,
        duration=max(20, round(1000 * stride / fps)),
    )
    return buffer.getvalue(), height, width


def log_to_tensorboard(
    log_dir: str | Path,
    *,
    step: int,
    scalars: dict[str, float],
    video: str | Path | None,
    video_tag: str = "eval/video",
) -> None:
    """`scalars` and, given a video file, its GIF, in one event of a new file in `log_dir`."""
    from tensorboard.compat.proto.summary_pb2 import Summary

    from rlpar.logging.event_file import EventFile

    values = [Summary.Value(tag=tag, simple_value=float(value)) for tag, value in scalars.items()]
    if video is not None:
        frames, fps = read_video(video)
        if frames:
            encoded, height, width = gif_bytes(frames, fps)
            image = Summary.Image(height=height, width=width, colorspace=3, encoded_image_string=encoded)
            values.append(Summary.Value(tag=video_tag, image=image))
    events = EventFile(log_dir)
    events.add_summary(Summary(value=values), global_step=step)
    events.close()


def log_to_wandb(
    run_dir: str | Path,
    config: dict,
    wandb_options: dict,
    *,
    step: int,
    scalars: dict[str, float],
    video: str | Path | None,
    name: str,
    video_tag: str = "eval/video",
) -> None:
    """A W&B run of its own (job type `evaluate`, grouped with the training run's settings):
    the scalars and the MP4. Offline unless the run's logger said otherwise."""
    import wandb

    from rlpar.logging.metrics_logger import _start_wandb, finish_wandb

    run = _start_wandb(Path(run_dir), config, job_type="evaluate", name=name, **wandb_options)
    try:
        row: dict = dict(scalars)
        if video is not None:
            suffix: Any = Path(video).suffix.lstrip(".")  # one of wandb's formats (gif, mp4, ...): it checks
            row[video_tag] = wandb.Video(str(video), format=suffix)
        run.log(row, step=step)
    finally:
        finish_wandb(run)
