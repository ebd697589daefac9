"""How each space type becomes policy rows and env actions, and the rows' dtypes through a batch."""

import gymnasium as gym
import numpy as np
import pytest

from rlpar.envs.factory import EnvSpec, make_vector_env
from rlpar.envs.spaces import (ActionMapper, describe_action_space, describe_observation_space,
                               flatten_observation_fn, observation_dim)


def test_dict_and_tuple_observations_flatten_per_key_in_the_space_order():
    space = gym.spaces.Dict({
        "b_pos": gym.spaces.Box(-1, 1, (2,)),
        "a_kind": gym.spaces.Discrete(3, start=1),
        "c_more": gym.spaces.Tuple((gym.spaces.MultiDiscrete([2, 3]), gym.spaces.MultiBinary(2))),
    })
    batch = {"b_pos": np.array([[0.5, -0.5], [1.0, 0.0]]), "a_kind": np.array([1, 3]),
             "c_more": (np.array([[1, 2], [0, 0]]), np.array([[1, 0], [0, 1]]))}
    rows = flatten_observation_fn(space)(batch)
    assert rows.dtype == np.float32 and rows.shape == (2, observation_dim(space)) == (2, 12)
    # Gymnasium's Dict orders keys: a_kind (one-hot of 3), b_pos (2), c_more (one-hot 2 + 3, bits 2)
    np.testing.assert_array_equal(rows[0], [1, 0, 0, 0.5, -0.5, 0, 1, 0, 0, 1, 1, 0])
    np.testing.assert_array_equal(rows[1], [0, 0, 1, 1.0, 0.0, 1, 0, 1, 0, 0, 0, 1])


@pytest.mark.parametrize("shape,image_shape,channels_last", [
    ((96, 96, 3), (3, 96, 96), True), ((4, 84, 84), (4, 84, 84), False), ((84, 84), (1, 84, 84), False)])
def test_uint8_images_stay_bytes_with_their_layout(shape, image_shape, channels_last):
    space = gym.spaces.Box(0, 255, shape, np.uint8)
    info = describe_observation_space(space)
    assert (info.obs_dtype, info.image_shape, info.channels_last) == ("uint8", image_shape, channels_last)
    images = np.random.default_rng(0).integers(0, 256, (2, *shape), dtype=np.uint8)
    rows = flatten_observation_fn(space)(images)
    assert rows.dtype == np.uint8 and rows.shape == (2, info.obs_dim)
    np.testing.assert_array_equal(rows[1].reshape(shape), images[1])


def test_float_boxes_of_rank_three_are_not_images():
    info = describe_observation_space(gym.spaces.Box(0.0, 1.0, (8, 8, 3), np.float32))
    assert (info.obs_dtype, info.image_shape, info.obs_dim) == ("float32", (), 192)


def test_factored_actions_map_to_the_env_dtype_and_starts():
    multi = describe_action_space(gym.spaces.MultiDiscrete([3, 2], start=[1, -1]))
    assert (multi.nvec, multi.size, multi.factored) == ((3, 2), 5, True)
    np.testing.assert_array_equal(ActionMapper(multi).to_env(np.array([[0, 1], [2, 0]])), [[1, 0], [3, -1]])
    bits = describe_action_space(gym.spaces.MultiBinary((2, 2)))
    assert bits.nvec == (2, 2, 2, 2) and bits.shape == (2, 2)
    out = ActionMapper(bits).to_env(np.array([[0, 1, 1, 0]]))
    assert out.dtype == np.int8 and out.tolist() == [[[0, 1], [1, 0]]]
    assert gym.spaces.MultiBinary((2, 2)).contains(out[0])


def test_unsupported_spaces_are_named():
    with pytest.raises(TypeError, match="Box, Discrete, MultiDiscrete, MultiBinary"):
        flatten_observation_fn(gym.spaces.Dict({"text": gym.spaces.Text(5)}))
    with pytest.raises(TypeError, match="Discrete, Box, MultiDiscrete and MultiBinary"):
        describe_action_space(gym.spaces.Tuple((gym.spaces.Discrete(2),)))


def test_toy_environments_step_through_a_vector_env():
    venv = make_vector_env(EnvSpec(id="rlpar/PixelGridWorld-v0"), 2)
    obs, _ = venv.reset(seed=[0, 1])
    assert obs.shape == (2, 5, 5, 3) and obs.dtype == np.uint8
    assert (obs[..., 0] == 255).sum() == 2 and (obs[..., 1] == 255).sum() == 2  # one agent and one goal each
    venv.close()


def test_auto_whitening_covers_boxes_inside_dicts_but_not_lone_images_or_one_hots():
    from rlpar.envs.spaces import whitened_by_default

    box, image = gym.spaces.Box(-5, 5, (2,)), gym.spaces.Box(0, 255, (8, 8, 3), np.uint8)
    assert whitened_by_default(box) and not whitened_by_default(image)
    assert whitened_by_default(gym.spaces.Dict({"k": gym.spaces.Discrete(2), "x": box}))
    assert whitened_by_default(gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Dict({"img": image}))))
    assert not whitened_by_default(gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.MultiDiscrete([2, 3]))))
