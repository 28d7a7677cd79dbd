"""One rank of test_oneccl_under_torchrun.py's torchrun job (no MPI launcher): CPU tensors take the
oneCCL transport by default; zigzag's out and gradients on this rank's shard against PyTorch's
attention on the whole sequence, which every rank computes from the same seed. Prints "ok" or fails."""

import torch
import torch.nn.functional as F

import spattn

SEQ, HEADS, KV_HEADS, DIM = 48, 4, 2, 8


def main():
    rank, world_size, _ = spattn.setup_distributed(device="cpu")
    assert spattn.cpu_transport() == "oneccl", spattn.cpu_transport()
    generator = torch.Generator().manual_seed(11)
    q, k, v, dout = (torch.randn(1, SEQ, heads, DIM, generator=generator, dtype=torch.float64)
                     for heads in (HEADS, KV_HEADS, KV_HEADS, HEADS))
    full = [tensor.clone().requires_grad_() for tensor in (q, k, v)]
    group = HEADS // KV_HEADS
    expected = F.scaled_dot_product_attention(
        full[0].transpose(1, 2), full[1].repeat_interleave(group, 2).transpose(1, 2),
        full[2].repeat_interleave(group, 2).transpose(1, 2), is_causal=True).transpose(1, 2)
    expected.backward(dout)

    layout = spattn.sequence_layout("zigzag", SEQ, HEADS, KV_HEADS, causal=True)
    mine = [layout.shard(tensor.float(), rank).requires_grad_() for tensor in (q, k, v)]
    out = spattn.zigzag_ring_flash_attn_func(*mine, causal=True)
    out.backward(layout.shard(dout.float(), rank))
    for name, got, want in (("out", out, expected), ("dq", mine[0].grad, full[0].grad),
                            ("dk", mine[1].grad, full[1].grad), ("dv", mine[2].grad, full[2].grad)):
        want = layout.shard(want.detach().float(), rank)
        error = (got.detach() - want).abs().max().item()
        assert error < 1e-4, f"rank {rank} of {world_size}: {name} differs by {error}"
    print("ok", flush=True)


if __name__ == "__main__":
    main()
