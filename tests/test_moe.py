"""Models from a Hugging Face config.json: dense as its preset, MoE on the roofline, MLA's KV,
expert parallelism."""

import json
import os

import pytest

from config import ConfigError, EngineConfig
from conftest import ROOT, servesim
from forward_model import RooflineClock
from gpu_memory import plan_memory
from moe import expected_experts_touched
from presets import DTYPE_BYTES, GPUS, MODELS

LLAMA_8B_CONFIG = str(ROOT / "tests" / "data" / "Llama-3.1-8B-Instruct")  # the folder
QWEN3_8B_CONFIG = str(ROOT / "code" / "models" / "Qwen3-8B.json")         # the file
SMALL_RUN = ["run", "--mode", "chunked", "--num-prompts", "6", "--dataset-name", "random",
             "--random-input-len", "300",
             "--random-output-len", "20", "--gpu", "h100-sxm5", "--format", "json"]


def results(*argv):
    completed = servesim(*SMALL_RUN, *argv)
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout)


def test_a_dense_config_json_gives_the_same_run_as_the_hand_written_preset():
    by_preset = results("--model", "llama-3.1-8b", "--max-model-len", "8192")
    by_file = results("--model", LLAMA_8B_CONFIG, "--max-model-len", "8192")
    assert by_file["results"] == by_preset["results"]
    assert by_file["config"]["num_gpu_blocks"] == by_preset["config"]["num_gpu_blocks"]
    fp8_preset = results("--model", "llama-3.1-8b-fp8", "--max-model-len", "8192")
    fp8_file = results("--model", LLAMA_8B_CONFIG, "--quantization", "fp8",
                       "--max-model-len", "8192")
    assert fp8_file["results"] == fp8_preset["results"] != by_preset["results"]


def test_a_preset_and_its_shipped_config_json_are_the_same_model():
    by_preset, by_file = results("--model", "qwen3-8b"), results("--model", QWEN3_8B_CONFIG)
    assert by_file["results"] == by_preset["results"]
    assert by_file["config"]["max_model_len"] == 40960  # max_position_embeddings, as vLLM


def test_deepseek_v3_caches_mla_latents_and_starts_on_eight_h200_at_fp8():
    model = MODELS["deepseek-v3"]
    assert model.weight_dtype == "fp8" and model.num_layers == 61
    assert model.kv_bytes_per_token("auto") == 61 * (512 + 64) * 2       # 70,272 bytes
    plain = 61 * model.mla.plain_kv_values_per_layer(model.num_heads) * 2  # 128 x (192 + 128)
    assert plain > 70 * model.kv_bytes_per_token("auto") and plain > 4.9e6
    config = EngineConfig(model="deepseek-v3", gpu="h200", tensor_parallel_size=8,
                          max_model_len=model.max_position_embeddings)
    config.validate()
    plan = plan_memory(config)
    assert plan.kv_cache_tokens >= model.max_position_embeddings
    with pytest.raises(ConfigError, match="needs .* GiB of weights"):
        plan_memory(EngineConfig(model="deepseek-v3", gpu="h200", tensor_parallel_size=4))


def moe_clock(**engine):
    config = EngineConfig(**dict(dict(model="qwen3-30b-a3b", gpu="h100-sxm5"), **engine))
    return config, RooflineClock(config)


def streaming_floor_s(num_params: float, dtype: str, config: EngineConfig) -> float:
    """Reading num_params weights at the GPU's full datasheet bandwidth, per GPU."""
    gpu = GPUS[config.gpu]
    return (num_params * DTYPE_BYTES[dtype] / config.tensor_parallel_size
            / (gpu.memory_bandwidth_gbs * 1e9))


def test_a_batch_of_one_reads_its_active_and_shared_weights_not_every_expert():
    config, clock = moe_clock()
    model = MODELS[config.model]
    one = clock.decode_step_time_s(1, 1000)
    active_floor = streaming_floor_s(model.num_active_linear_params, "bf16", config)
    every_expert_floor = streaming_floor_s(model.num_linear_params, "bf16", config)
    assert active_floor <= one < every_expert_floor
    # What it reads beyond the dense weights: exactly k experts in each MoE layer.
    assert clock.experts.stream_s(1) == pytest.approx(
        model.moe.experts_per_token * clock.experts.stream_s_per_expert)


def test_a_large_batch_approaches_streaming_every_expert():
    config, clock = moe_clock()
    model = MODELS[config.model]
    every_expert_s = model.moe.num_experts * clock.experts.stream_s_per_expert
    assert clock.experts.stream_s(512) == pytest.approx(every_expert_s, rel=1e-3)
    assert clock.experts.stream_s(8) < 0.5 * every_expert_s
    big = clock.decode_step_time_s(512, 512 * 1000)
    assert big >= streaming_floor_s(model.num_linear_params, "bf16", config)


def test_expected_experts_touched_is_k_for_one_token_and_all_for_many():
    assert expected_experts_touched(8, 2, 1) == pytest.approx(2)
    assert expected_experts_touched(8, 2, 4) == pytest.approx(8 * (1 - 0.75 ** 4))
    assert expected_experts_touched(256, 8, 0) == 0
    assert 255 < expected_experts_touched(256, 8, 256) < 256


def test_expert_parallel_ranks_hold_more_kv_per_gpu_and_pay_an_all_to_all_per_moe_layer():
    """vLLM docs ("Data Parallel Deployment"): DP attention avoids duplicating MLA's KV cache
    over TP ranks. On 8 x H200, TP 8 keeps every latent on every GPU; 8 attention ranks with
    the experts spread over them keep each its own requests' latents."""
    common = dict(model="deepseek-v3", gpu="h200", max_model_len=8192)
    tp8 = EngineConfig(tensor_parallel_size=8, **common)
    ep8 = EngineConfig(data_parallel_size=8, enable_expert_parallel=True, **common)
    assert plan_memory(ep8).kv_cache_tokens / 8 > 2 * plan_memory(tp8).kv_cache_tokens / 8
    experts = RooflineClock(ep8).experts
    num_moe_layers = MODELS["deepseek-v3"].moe.num_moe_layers
    assert num_moe_layers == 61 - 3  # first_k_dense_replace
    assert experts.all_to_all_s(0) > 0 and experts.all_to_all_s(256) > experts.all_to_all_s(1)
    tp_only = RooflineClock(tp8).experts
    assert tp_only.all_to_all_s(256) == 0
    with_ep = RooflineClock(EngineConfig(tensor_parallel_size=8, enable_expert_parallel=True,
                                         **common))
    assert with_ep.experts.all_to_all_s(1) > 0


def test_gpt_oss_ships_mxfp4_experts_and_sliding_window_layers():
    model = MODELS["gpt-oss-120b"]
    assert (model.weight_dtype, model.expert_dtype) == ("bf16", "mxfp4")
    assert 60e9 < model.weight_bytes < 70e9  # the checkpoint's 65 GB
    assert model.num_sliding_layers == 18 and model.sliding_window == 128
    assert model.kv_bytes_per_token("auto") == 18 * 2 * 8 * 64 * 2


@pytest.mark.parametrize("change, says", [
    ({"architectures": ["BertModel"]}, "architectures 'BertModel' is not one servesim reads"),
    ({"hidden_size": None}, "key hidden_size missing"),
    ({"num_hidden_layers": 0}, "key num_hidden_layers must be an integer in [1, 2,147,483,647]"),
    ({"num_experts_per_tok": 200}, "num_experts_per_tok 200 is more than num_experts 128"),
    ({"quantization_config": {"quant_method": "gptq"}}, "quant_method 'gptq'"),
])
def test_a_bad_config_json_is_one_line_naming_the_key(tmp_path, change, says):
    with open(ROOT / "code" / "models" / "Qwen3-30B-A3B.json") as file:
        data = json.load(file)
    data.update(change)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    completed = servesim("run", "--model", str(tmp_path))
    assert completed.returncode == 2
    assert says in completed.stderr and len(completed.stderr.strip().splitlines()) == 1


def test_max_model_len_above_max_position_embeddings_and_a_second_quantization_are_refused():
    with pytest.raises(ConfigError, match="above qwen3-8b's max_position_embeddings 40960"):
        EngineConfig(model="qwen3-8b", max_model_len=50000).validate()
    with pytest.raises(ConfigError, match="ships quantized with mxfp4"):
        EngineConfig(model="gpt-oss-20b", quantization="fp8").validate()
    fp8 = plan_memory(EngineConfig(model="qwen3-8b", quantization="fp8"))
    assert fp8.weight_bytes < plan_memory(EngineConfig(model="qwen3-8b")).weight_bytes
    assert os.path.isfile(QWEN3_8B_CONFIG)


def test_mtp_drafts_with_deepseek_v3s_own_layer_at_its_published_acceptance():
    plain = results("--model", "deepseek-v3", "--gpu", "h200", "--tensor-parallel-size", "8",
                    "--max-model-len", "8192")
    mtp = results("--model", "deepseek-v3", "--gpu", "h200", "--tensor-parallel-size", "8",
                  "--max-model-len", "8192", "--speculative-config",
                  '{"method": "mtp", "num_speculative_tokens": 1}')
    assert mtp["results"][0]["mean_tpot_ms"] < plain["results"][0]["mean_tpot_ms"]
    assert mtp["results"][0]["spec_decode_num_drafts"] > 0
    # The MTP layer's weights and its one layer of latent KV come off the pool.
    assert mtp["config"]["num_gpu_blocks"] < plain["config"]["num_gpu_blocks"]
    refused = servesim("run", "--model", "qwen3-8b", "--speculative-config",
                       '{"method": "mtp", "num_speculative_tokens": 1}')
    assert refused.returncode == 2 and "num_nextn_predict_layers" in refused.stderr


def test_calibration_has_ten_moe_rows_with_sources_and_the_kept_aside_set_within_its_goal():
    from commands import calibration, calibration_rows
    from main import simulate
    assert len(calibration_rows.MOE.measurements) >= 10 and calibration_rows.MOE.sources
    aside = calibration.compare_group(calibration_rows.MOE_ASIDE, simulate)
    assert len(aside) >= 10
    assert calibration.median_abs_ln(aside) <= 0.25
    assert calibration.meets_goal(calibration_rows.MOE_ASIDE, aside)
    moe_ids = {m.id for m in calibration_rows.MOE.measurements}
    assert moe_ids.isdisjoint(c.measurement.id for c in aside)
