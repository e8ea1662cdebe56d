"""Differential tests: two short test oracles, each an independent transcription of a peer's
algorithm, run on the same uniforms as ``gsd_core.verify``.

- ``hf_speculative_sampling``: transformers ``src/transformers/generation/utils.py``,
  ``_speculative_sampling`` (Leviathan et al., Alg. 1), its ``is_done_candidate=False`` path
  (the last draft not an end-of-sequence token): accept while r_i <= p_i(x_i) / q_i(x_i);
  at the first rejection sample norm(clamp(p - q, min=0)), after L acceptances the bonus row. Its
  ``torch.multinomial`` is replaced by an inverse-CDF draw with the uniform u_L, so that it and
  gsd consume the same randomness: accepted counts and every emitted token must agree.
- ``vllm_rejection_sample``: vLLM's PyTorch reference of the rejection sampler (the v1
  ``rejection_random_sample_kernel`` rule as written out in vllm-ascend
  ``vllm_ascend/sample/rejection_sampler.py``, ``rejection_random_sample_pytorch``, and the
  recovered-token race of ``native_sample_recovered_tokens`` in vLLM
  ``tests/v1/sample/test_rejection_sampler.py``): accept iff q(x) > 0 and p(x) / q(x) >= u, the
  recovered token argmax((p - q)+ / E), E ~ Exp(1) [V], one vector per request. The accept
  tests share the uniforms: accepted counts and accepted drafts must agree; the race uses other
  randomness, so its tokens are compared by law, with gsd's exact laws.

The peers' ties (u = a accepts) and q(x) = 0 (accepted by transformers) have probability 0 here:
drafts are drawn from q and the uniforms are float64 (docs/conventions.md).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from scipy import stats

from gsd_core import output_distribution, residual_distribution, verify

ALPHA = 1e-3  # chi-square level: a correct sampler fails one seed in a thousand
WINDOWS, L, V = 20_000, 3, 12


def inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The first y with cdf(y) > u (float64 cumulative sum), clamped to V - 1. [B, V] -> [B]."""
    cdf = probs.double().cumsum(-1)
    values = u.double().reshape(-1, 1).contiguous()
    return torch.searchsorted(cdf, values, right=True).squeeze(-1).clamp(max=probs.shape[-1] - 1)


def hf_speculative_sampling(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor,
                            r: torch.Tensor, u_draw: torch.Tensor
                            ) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' ``_speculative_sampling``, batched: p [B, L + 1, V], q [B, L, V],
    drafts and r [B, L], u_draw [B]. Returns (n_matches [B], the new token [B])."""
    window = drafts.shape[-1]
    p_i = p[:, :window].gather(-1, drafts.unsqueeze(-1)).squeeze(-1)
    q_i = q.gather(-1, drafts.unsqueeze(-1)).squeeze(-1)
    is_accepted = r <= p_i / q_i
    n_matches = ((~is_accepted).cumsum(-1) < 1).sum(-1)
    rows = torch.arange(p.shape[0])
    p_next = p[rows, n_matches]
    q_next = F.pad(q, (0, 0, 0, 1))[rows, n_matches]  # no draft at the bonus row
    p_prime = torch.clamp(p_next - q_next, min=0)
    p_prime = torch.where((n_matches < window).unsqueeze(-1),
                          p_prime / p_prime.sum(-1, keepdim=True), p_next)
    return n_matches, inverse_cdf(p_prime, u_draw)


def vllm_rejection_sample(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor,
                          u: torch.Tensor, generator: torch.Generator
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's rejection sampler, batched: accept iff q(x) > 0 and p(x) / q(x) >= u; the first
    rejection emits argmax((p - q)+ / E), all accepted emit the bonus row's argmax(p_L / E).
    Returns (accepted count [B], the token after the accepted drafts [B])."""
    window = drafts.shape[-1]
    draft_prob = q.gather(-1, drafts.unsqueeze(-1)).squeeze(-1)
    target_prob = p[:, :window].gather(-1, drafts.unsqueeze(-1)).squeeze(-1)
    accepted = (draft_prob > 0) & (target_prob / draft_prob >= u)
    count = accepted.int().cumprod(-1).sum(-1)
    rows = torch.arange(p.shape[0])
    prob = (p[rows, count] - F.pad(q, (0, 0, 0, 1))[rows, count]).clamp(min=0)
    noise = torch.empty(p.shape[0], p.shape[-1], dtype=p.dtype).exponential_(
        generator=generator)
    return count, (prob / noise).argmax(-1)


def chi_square_pvalue(samples: torch.Tensor, probs: torch.Tensor) -> float:
    """Pearson's test of ``samples`` against ``probs`` [V] (cells with expected count < 5
    pooled); 0 if a sample falls where probs is 0."""
    observed = torch.bincount(samples, minlength=probs.numel()).double()
    expected = probs.double() * samples.numel()
    if bool((observed[expected == 0] > 0).any()):
        return 0.0
    keep = expected >= 5
    obs, exp = observed[keep].tolist(), expected[keep].tolist()
    if float(expected[~keep].sum()) > 0:
        obs.append(float(observed[~keep].sum()))
        exp.append(float(expected[~keep].sum()))
    scale = sum(obs) / sum(exp)
    return float(stats.chisquare(obs, [e * scale for e in exp]).pvalue)


def shared_window(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Generator]:
    """One (p [L + 1, V], q [L, V]) pair for every window, drafts drawn from q. float64."""
    generator = torch.Generator().manual_seed(seed)
    p = torch.softmax(2 * torch.randn(L + 1, V, generator=generator, dtype=torch.float64), -1)
    q = torch.softmax(2 * torch.randn(L, V, generator=generator, dtype=torch.float64), -1)
    drafts = torch.multinomial(q, WINDOWS, replacement=True, generator=generator).T
    return p.expand(WINDOWS, -1, -1), q.expand(WINDOWS, -1, -1), drafts, generator


def test_transformers_oracle_takes_the_same_decisions_and_tokens() -> None:
    for seed in range(3):
        p, q, drafts, generator = shared_window(seed)
        uniforms = torch.rand(WINDOWS, L + 1, generator=generator, dtype=torch.float64)
        n, token = hf_speculative_sampling(p, q, drafts, uniforms[:, :L], uniforms[:, L])
        result = verify(p[0], q[0], drafts, uniforms=uniforms)  # rows broadcast over drafts
        assert torch.equal(result.num_accepted, n)
        expected = torch.where(torch.arange(L + 1) < n.unsqueeze(-1),
                               F.pad(drafts, (0, 1)), -1).scatter(-1, n.unsqueeze(-1),
                                                                  token.unsqueeze(-1))
        assert torch.equal(result.tokens, expected)
        # the emitted token's law at position 0: the exact one-step law, which is p_0
        exact = output_distribution(p[0, 0], q[0, 0])
        assert torch.allclose(exact, p[0, 0], rtol=0, atol=1e-15)
        assert chi_square_pvalue(result.tokens[:, 0], exact) > ALPHA


def test_vllm_oracle_takes_the_same_decisions_and_samples_the_same_laws() -> None:
    for seed in range(3):
        p, q, drafts, generator = shared_window(seed)
        uniforms = torch.rand(WINDOWS, L + 1, generator=generator, dtype=torch.float64)
        count, token = vllm_rejection_sample(p, q, drafts, uniforms[:, :L], generator)
        result = verify(p[0], q[0], drafts, uniforms=uniforms)
        assert torch.equal(result.num_accepted, count)
        run = torch.arange(L) < count.unsqueeze(-1)
        assert torch.equal(result.tokens[:, :L][run], drafts[run])
        # the token after the accepted drafts: by law, against gsd's exact laws
        first = torch.where(count > 0, drafts[:, 0], token)
        assert chi_square_pvalue(first, output_distribution(p[0, 0], q[0, 0])) > ALPHA
        rejected_first = count == 0
        assert chi_square_pvalue(token[rejected_first],
                                 residual_distribution(p[0, 0], q[0, 0])) > ALPHA
        all_accepted = count == L
        assert chi_square_pvalue(token[all_accepted], p[0, L]) > ALPHA
