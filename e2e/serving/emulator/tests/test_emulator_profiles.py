"""The GPU x model profiles (profiles.py): the published figures they were calibrated on are reproduced at the
published settings, the memory arithmetic by hand (DeepSeek's parameter count from its config, KV bytes per token,
tensor/DP-attention splitting), H200 against H100, and the selection from a pod's model path and GPU label.

The calibration figures (PROFILE_SOURCES in profiles.py): SGLang's 158.34 / 373.25 tokens/s for Llama-3.1-8B on one
H100 (baseline / EAGLE-3), the SGLang team's 96-H100 DeepSeek deployment (54,543 input tokens/s per node on EP32 at 2K
prompts, 22,282 output tokens/s per node on EP72 at batch 256 and 2,000 KV tokens), and SGLang's 1.8x / 1.5x NEXTN
speedups at batch 1 / 32 on H200 TP8. Each efficiency constant was chosen for one of them; these tests keep the model
on them when the cost functions change.
"""

from __future__ import annotations

import pytest

from e2e.serving.emulator import profiles
from e2e.serving.emulator.capacity import Limits, decode_capacity, prefill_capacity
from e2e.serving.emulator.profiles import (
    DEEPSEEK_DENSE_PARAMS,
    DEEPSEEK_R1,
    DEEPSEEK_ROUTED_PARAMS,
    EAGLE3_MT_BENCH,
    H100_DEEPSEEK_R1,
    H100_LLAMA_3_1_8B,
    H100_SXM,
    H200_DEEPSEEK_R1,
    H200_LLAMA_3_1_8B,
    H200_SXM,
    LLAMA_3_1_8B,
    NEXTN_ACCEPT_LENGTH,
    PROFILES,
    describe,
    gpu_for_product,
    max_total_num_tokens,
    select_profile,
    with_eagle3,
    with_nextn,
)

GPUS_PER_NODE = 8


def _batch_one_rate(profile: profiles.Profile, context: int = 1_000) -> float:
    """Output tokens/s of one request (MT-bench-like: ~1,000 tokens of context)."""
    return profile.tokens_per_decode_step / profile.decode_step_seconds(1, context)


# --- published figures -----------------------------------------------------------------------------------------------


def test_llama_batch_one_baseline_and_eagle3_on_h100() -> None:
    """docs.sglang.io speculative decoding, Performance Highlights: 158.34 (no speculation) and 373.25 (EAGLE-3)
    tokens/s, Llama-3.1-8B-Instruct, MT-bench, 1x H100."""
    assert _batch_one_rate(H100_LLAMA_3_1_8B) == pytest.approx(158.34, rel=0.05)
    eagle3 = with_eagle3(
        H100_LLAMA_3_1_8B,
        EAGLE3_MT_BENCH["accept_length"],
        int(EAGLE3_MT_BENCH["num_steps"]),
        int(EAGLE3_MT_BENCH["num_draft_tokens"]),
    )
    assert _batch_one_rate(eagle3) == pytest.approx(373.25, rel=0.05)
    # The draft passes cost something: the speedup is below the accept length.
    assert _batch_one_rate(eagle3) / _batch_one_rate(H100_LLAMA_3_1_8B) < EAGLE3_MT_BENCH["accept_length"]


def test_deepseek_prefill_per_node_at_the_blogs_setting() -> None:
    """lmsys.org/blog/2025-05-05-large-scale-ep: 4 prefill nodes (EP32, DP attention), 2K prompts: 54,543 input
    tokens/s per node (headline 52.3k), 16,384 tokens per device. Through the analytic capacity of one DP rank (its
    chunk budget is the 16,384 tokens), times the 8 GPUs (= 8 DP ranks) of a node. 5%: the constant was chosen for
    this figure, so only the rounding of mfu/ep_layer_seconds and a later change of the model can move it."""
    profile = H100_DEEPSEEK_R1.for_server(tp=32, dp=32, ep=32)
    pool = profile.max_total_num_tokens(0.85)
    limits = Limits(max_total_num_tokens=pool, max_running_requests=128, chunked_prefill_size=16_384)
    per_node = prefill_capacity(profile, limits, prompt=2_000) * 2_000 * GPUS_PER_NODE
    assert per_node == pytest.approx(54_543, rel=0.05)
    assert per_node == pytest.approx(52_300, rel=0.06)  # the headline figure for the whole deployment


def test_deepseek_decode_per_node_at_the_blogs_setting() -> None:
    """The blog's decode: 9 nodes (EP72, DP attention), 256 requests per GPU, KV length 2,000: 22,282 output tokens/s
    per node. Through the step function and through decode_capacity (the scheduler's batch at saturation); the
    latter's context is prompt + output/2, so a 1,950-token prompt and 100 output tokens average 2,000."""
    profile = H100_DEEPSEEK_R1.for_server(tp=72, dp=72, ep=72)
    step = profile.decode_step_seconds(256, 256 * 2_000)
    assert 256 / step * GPUS_PER_NODE == pytest.approx(22_282, rel=0.05)
    pool = profile.max_total_num_tokens(0.85)
    assert pool > 256 * (2_000 + 512)  # the pool holds the batch with SGLang's decode reservation
    limits = Limits(max_total_num_tokens=pool, max_running_requests=256)
    per_node = decode_capacity(profile, limits, prompt=1_950, output=100) * 100 * GPUS_PER_NODE
    assert per_node == pytest.approx(22_282, rel=0.05)


def test_deepseek_nextn_speedups_on_h200_tp8() -> None:
    """SGLang's DeepSeek docs: MTP improves decoding 1.8x at batch 1 and 1.5x at batch 32 on H200 TP8; accept length
    1.875 from DeepSeek-V3's 85-90% second-token acceptance, the docs' minimum configuration (1 step, 2 draft
    tokens). 6%: one constant (tp_layer_seconds) serves both figures and sits between them."""
    base = H200_DEEPSEEK_R1.for_server(tp=8)
    mtp = with_nextn(base, NEXTN_ACCEPT_LENGTH, num_steps=1, num_draft_tokens=2)
    for batch, published in ((1, 1.8), (32, 1.5)):
        context = batch * 1_000
        speedup = (
            mtp.tokens_per_decode_step
            / mtp.decode_step_seconds(batch, context)
            * base.decode_step_seconds(batch, context)
        )
        assert speedup == pytest.approx(published, rel=0.06), batch


# --- memory arithmetic by hand ---------------------------------------------------------------------------------------


def test_deepseek_parameters_from_its_config_match_the_published_totals() -> None:
    """A routed expert is 3 x 7168 x 2048 = 44,040,192 parameters; 58 MoE layers x 256 of them = 653.9e9. The rest
    (MLA attention, 3 dense MLPs, shared experts, embedding and head) is 17.0e9: 670.9e9 in all against the
    published 671B, and 17.0e9 + 58 x 8 experts = 37.4e9 active against the published 37B."""
    assert DEEPSEEK_ROUTED_PARAMS == 58 * 256 * 44_040_192
    total, active = DEEPSEEK_DENSE_PARAMS + DEEPSEEK_ROUTED_PARAMS, DEEPSEEK_DENSE_PARAMS + 58 * 8 * 44_040_192
    assert total == pytest.approx(DEEPSEEK_R1.params, rel=0.001)
    assert active == pytest.approx(DEEPSEEK_R1.flops_params, rel=0.02)


def test_kv_bytes_per_token_and_weights_by_hand() -> None:
    # Llama: 8 KV heads x 128 x 32 layers x 2 (K, V) x 2 bytes; DeepSeek MLA: (512 + 64) x 61 layers x 2 bytes (bf16:
    # the model dtype, which --kv-cache-dtype auto keeps for R1's FP8 checkpoint).
    assert LLAMA_3_1_8B.kv_bytes_per_token == 131_072
    assert DEEPSEEK_R1.kv_bytes_per_token == 70_272
    # FP8 weights: one byte each; an fp8 KV cache halves the cell.
    assert DEEPSEEK_R1.weight_bytes == 671e9
    fp8_kv = select_profile("deepseek-ai/DeepSeek-R1", "NVIDIA-H200", tp=8, kv_cache_dtype="fp8_e4m3")
    assert fp8_kv is not None and fp8_kv.kv_bytes_per_token_per_gpu == 35_136


def test_tensor_parallel_splits_weights_and_mha_heads_but_not_mla() -> None:
    # Llama TP2: 8.03e9 x 2 B / 2 per GPU, 4 of the 8 KV heads per GPU; TP16: 8 // 16 = 0 -> 1 head (replicated).
    tp2 = H100_LLAMA_3_1_8B.for_server(tp=2)
    assert tp2.weight_bytes_per_gpu == pytest.approx(8.03e9)
    assert tp2.kv_bytes_per_token_per_gpu == 65_536
    assert H100_LLAMA_3_1_8B.for_server(tp=16).kv_bytes_per_token_per_gpu == 16_384
    # Per GPU: 80 GiB x 0.85 = 73,014,444,032 B - 8.03e9 B = 64,984,444,032 B over 65,536 = 991,583 tokens.
    assert tp2.max_total_num_tokens(0.85) == 991_583
    # DeepSeek TP8 without DP attention: 671e9 / 8 B of weights per GPU, the whole MLA cell on every GPU; H200:
    # 141 GiB x 0.85 = 128,687,957,606 B - 83,875,000,000 = 44,812,957,606 B over 70,272 = 637,707 tokens (637,696
    # with a page of 64 tokens): the pool of the whole server.
    tp8 = H200_DEEPSEEK_R1.for_server(tp=8)
    assert tp8.weight_bytes_per_gpu == pytest.approx(671e9 / 8, rel=1e-3)
    assert tp8.kv_bytes_per_token_per_gpu == 70_272
    assert tp8.max_total_num_tokens(0.85) == 637_707
    assert tp8.max_total_num_tokens(0.85, page_size=64) == 637_696
    assert tp8.server_pool_tokens(0.85) == tp8.max_total_num_tokens(0.85)
    # DeepSeek doesn't fit on 8 H100s (83.9 GB of weights per 80 GiB GPU): no pool.
    assert H100_DEEPSEEK_R1.for_server(tp=8).max_total_num_tokens(0.85) == 0
    # DP attention 8 on TP8: attention TP 1, the dense part whole on every GPU, the experts split 8 ways, and each
    # of the 8 DP ranks has its own pool.
    dp8 = H200_DEEPSEEK_R1.for_server(tp=8, dp=8, ep=8)
    assert dp8.attention_tp == 1
    # (The dense part is the published 671e9 minus the counted routed experts: 17.1e9.)
    assert dp8.weight_bytes_per_gpu == pytest.approx(671e9 - DEEPSEEK_ROUTED_PARAMS * 7 / 8)
    assert dp8.server_pool_tokens(0.85) == 8 * dp8.max_total_num_tokens(0.85)
    with pytest.raises(ValueError, match="dp must divide tp"):
        H100_DEEPSEEK_R1.for_server(tp=8, dp=3)


def test_the_legacy_whole_model_pool_is_the_tp1_profile_pool() -> None:
    assert H100_LLAMA_3_1_8B.max_total_num_tokens(0.85) == max_total_num_tokens(H100_SXM, LLAMA_3_1_8B, 0.85)


def test_a_moe_decode_step_reads_more_experts_as_the_batch_grows() -> None:
    profile = H200_DEEPSEEK_R1.for_server(tp=8)
    assert DEEPSEEK_R1.touched_expert_fraction(1) == pytest.approx(8 / 256)
    assert DEEPSEEK_R1.touched_expert_fraction(1_000) == pytest.approx(1.0, abs=1e-9)
    per_token = [profile.decode_step_seconds(b, b * 1_000) / b for b in (1, 8, 64)]
    assert per_token[0] > per_token[1] > per_token[2]  # batching amortizes the weights
    steps = [profile.decode_step_seconds(b, b * 1_000) for b in (1, 8, 64)]
    assert steps[0] < steps[1] < steps[2]  # but each step reads more experts and KV


def test_tp_collectives_slow_a_step() -> None:
    one = H100_LLAMA_3_1_8B.decode_step_seconds(1, 1_000)
    two = H100_LLAMA_3_1_8B.for_server(tp=2).decode_step_seconds(1, 1_000)
    # Half the weights per GPU, plus 32 layers x 10 us of all-reduce (ASSUMPTION).
    assert two < one
    assert two > one / 2


# --- H200 against H100 -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("h100", "h200", "shape"),
    [
        (H100_LLAMA_3_1_8B, H200_LLAMA_3_1_8B, {"tp": 1}),
        (H100_DEEPSEEK_R1, H200_DEEPSEEK_R1, {"tp": 16, "dp": 16, "ep": 16}),
    ],
)
def test_h200_has_the_larger_pool_and_the_faster_memory_bound_decode(
    h100: profiles.Profile, h200: profiles.Profile, shape: dict[str, int]
) -> None:
    a, b = h100.for_server(**shape), h200.for_server(**shape)
    assert b.max_total_num_tokens(0.85) > a.max_total_num_tokens(0.85)
    assert b.decode_step_seconds(1, 1_000) < a.decode_step_seconds(1, 1_000)
    # The memory-bound part scales with the datasheet bandwidth ratio 4.8 / 3.35; the overheads do not.
    if shape["tp"] == 1:
        fixed = a.step_overhead_seconds
        ratio = (a.decode_step_seconds(1, 1_000) - fixed) / (b.decode_step_seconds(1, 1_000) - fixed)
        assert ratio == pytest.approx(4.8 / 3.35)
    # The same compute: a large prefill batch is compute-bound and takes the same time on both.
    assert b.prefill_step_seconds(16_384) == pytest.approx(a.prefill_step_seconds(16_384))


# --- selection -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "product", "expected"),
    [
        ("meta-llama/Llama-3.1-8B-Instruct", None, H100_LLAMA_3_1_8B),
        ("meta-llama/Meta-Llama-3.1-8B-Instruct", "NVIDIA-H100-80GB-HBM3", H100_LLAMA_3_1_8B),
        ("/models/llama-3.1-8b/", "NVIDIA-H200", H200_LLAMA_3_1_8B),
        ("deepseek-ai/DeepSeek-R1", "NVIDIA-H200", H200_DEEPSEEK_R1),
        ("deepseek-ai/DeepSeek-R1-0528", None, H100_DEEPSEEK_R1),
        ("deepseek-ai/DeepSeek-V3-0324", "NVIDIA-H100-80GB-HBM3", H100_DEEPSEEK_R1),
    ],
)
def test_select_profile_by_path_and_product(path: str, product: str | None, expected: profiles.Profile) -> None:
    assert select_profile(path, product) == expected


@pytest.mark.parametrize(
    ("path", "product"),
    [
        ("meta-llama/Llama-3.1-70B-Instruct", None),  # another size
        ("meta-llama/Llama-3.2-1B-Instruct", None),
        ("neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8", None),  # other weight bytes
        ("deepseek-ai/DeepSeek-R1-Distill-Llama-8B", None),  # a dense distilled model
        ("deepseek-ai/DeepSeek-V3.2-Exp", None),  # DSA: another KV layout
        ("deepseek-ai/DeepSeek-V2-Lite", None),
        ("Qwen/Qwen3-8B", None),
        ("meta-llama/Llama-3.1-8B-Instruct", "NVIDIA-H100-PCIe"),  # another bandwidth
        ("meta-llama/Llama-3.1-8B-Instruct", "NVIDIA-H200-NVL"),
        ("meta-llama/Llama-3.1-8B-Instruct", "NVIDIA-A100-SXM4-80GB"),
    ],
)
def test_select_profile_refuses_what_it_has_no_numbers_for(path: str, product: str | None) -> None:
    assert select_profile(path, product) is None


def test_select_profile_takes_the_server_shape_and_speculation_from_the_command_line() -> None:
    dp_attention = select_profile("deepseek-ai/DeepSeek-R1", "NVIDIA-H200", tp=16, dp=16, ep=16)
    assert dp_attention is not None and (dp_attention.tp, dp_attention.dp, dp_attention.ep) == (16, 16, 16)
    assert dp_attention == H200_DEEPSEEK_R1.for_server(tp=16, dp=16, ep=16)
    with pytest.raises(ValueError, match="dp must divide tp"):
        select_profile("deepseek-ai/DeepSeek-R1", "NVIDIA-H200", tp=16, dp=3)
    nextn = select_profile("deepseek-ai/DeepSeek-R1", "NVIDIA-H200", tp=8, speculative_algorithm="NEXTN")
    assert nextn is not None and nextn.speculative is not None
    assert (nextn.speculative.algorithm, nextn.speculative.num_steps, nextn.speculative.num_draft_tokens) == (
        "NEXTN",
        1,
        2,
    )
    assert nextn.tokens_per_decode_step == NEXTN_ACCEPT_LENGTH
    eagle3 = select_profile(
        "meta-llama/Llama-3.1-8B-Instruct",
        None,
        speculative_algorithm="EAGLE3",
        num_steps=3,
        num_draft_tokens=4,
        accept_length=2.5,
    )
    assert eagle3 is not None and eagle3.speculative is not None
    assert (eagle3.speculative.num_steps, eagle3.speculative.num_draft_tokens, eagle3.tokens_per_decode_step) == (
        3,
        4,
        2.5,
    )
    # An algorithm the profile has no draft for.
    assert select_profile("meta-llama/Llama-3.1-8B-Instruct", None, speculative_algorithm="NGRAM") is None
    assert select_profile("deepseek-ai/DeepSeek-R1", None, tp=16, speculative_algorithm="EAGLE3") is None


def test_gpu_products_and_descriptions() -> None:
    assert gpu_for_product(None) is H100_SXM
    assert gpu_for_product("NVIDIA-H200") is H200_SXM
    assert gpu_for_product("NVIDIA-H100-80GB-HBM3") is H100_SXM
    for profile in PROFILES:
        text = describe(profile)
        assert profile.gpu.name in text and profile.model.name in text
        assert "datasheet" in text and ("lmsys.org" in text or "docs.sglang.io" in text)
