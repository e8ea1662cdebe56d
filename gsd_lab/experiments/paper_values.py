"""The paper's numbers, in one place, each cited to its public source: the GSD paper (So et al.,
ICCV 2025, arXiv 2508.07747; its introduction, Fig. 4, Table 1 on Parti with Lumina-mGPT 7B and
Table 2), the lossless frontier from SCD / MC-SJD (arXiv 2510.24211) and SJD-PAC
(arXiv 2603.18599); and the paper's analyses this package does not reproduce, with the reason.
``claims`` judges each claim against them; ``paper`` re-exports them for the notebooks.
"""

from __future__ import annotations

from dataclasses import dataclass

GSD = "GSD paper (arXiv 2508.07747)"  # So, Shin, Kook, Park, ICCV 2025
SCD = "SCD (arXiv 2510.24211)"  # speculative coupled decoding, ICML 2026
PAC = "SJD-PAC (arXiv 2603.18599)"  # CVPR 2026
QUALITY = "condition_score"  # the stand-in's condition score, or the CLIP score on Lumina-mGPT


@dataclass(frozen=True)
class PaperNumber:
    """One reported value with its public source (paper and table, or repository and file)."""

    value: float
    source: str


AR_NFE = PaperNumber(2392, f"{GSD}, Table 1 (Parti): vanilla AR NFE")
SJD_NFE = PaperNumber(1035, f"{GSD}, Table 1 (Parti): SJD NFE")
GSD50_NFE = PaperNumber(637, f"{GSD}, Table 1 (Parti): GSD (G=50) NFE")
AMPLIFY3_NFE = PaperNumber(586, f"{GSD}, Table 1 (Parti): Amplify (k=3) NFE")
AR_CLIP = PaperNumber(32.091, f"{GSD}, Table 1 (Parti): vanilla AR CLIP")
GSD50_CLIP = PaperNumber(32.075, f"{GSD}, Table 1 (Parti): GSD (G=50) CLIP")
AMPLIFY3_CLIP = PaperNumber(31.774, f"{GSD}, Table 1 (Parti): Amplify (k=3) CLIP")
TOP1_SHARE_RANGE = (
    PaperNumber(0.50, f"{GSD}, introduction: 50-95% of tokens have top-1 < 5% (low end)"),
    PaperNumber(0.95, f"{GSD}, introduction: 50-95% of tokens have top-1 < 5% (high end)"),
)
SD_ACCEPTANCE_IMAGE = PaperNumber(
    0.40, f"{GSD}, introduction: SD acceptance about 40% in image AR models (70% in LLMs)"
)
TOP1_THRESHOLD = PaperNumber(0.05, f"{GSD}, introduction: the top-1 threshold")
REPLACED_CLIP = PaperNumber(
    32.089, f"{GSD}, Fig. 4: CLIP after replacing 50% of tokens with top-100 candidates"
)
TABLE2_NFE = {  # GSD paper (arXiv 2508.07747), Table 2 (Parti, G not stated in the digest)
    "(A)": PaperNumber(913.80, f"{GSD}, Table 2: (A) static, embedding distance"),
    "(B)": PaperNumber(685.31, f"{GSD}, Table 2: (B) dynamic, sorted by q"),
    "(C)": PaperNumber(636.24, f"{GSD}, Table 2: (C) dynamic, sorted by p"),
    "(D)": PaperNumber(636.75, f"{GSD}, Table 2: (D) sorted by p + filters"),
}
TABLE2_CLIP = {
    "(A)": PaperNumber(32.081, f"{GSD}, Table 2: (A) CLIP"),
    "(B)": PaperNumber(31.791, f"{GSD}, Table 2: (B) CLIP"),
    "(C)": PaperNumber(32.056, f"{GSD}, Table 2: (C) CLIP"),
    "(D)": PaperNumber(32.075, f"{GSD}, Table 2: (D) CLIP"),
}

# The lossless frontier (SCD, SJD-PAC): published on Lumina-mGPT 7B, COCO.
SCD_AR_NFE = PaperNumber(2390, f"{SCD}, Lumina-mGPT COCO: AR NFE")
SCD_NFE = PaperNumber(
    568, f"{SCD}, SCD (MC-SJD, ICML 2026), Lumina-mGPT COCO: SCD NFE (4.21x)"
)
SCD_SJD_NFE = PaperNumber(1036, f"{SCD}, Lumina-mGPT COCO: SJD (L = 64) NFE")
SCD_GSD10_NFE = PaperNumber(701, f"{SCD}, Lumina-mGPT COCO: lossy GSD (G = 10) NFE")
SJD_PAC_STEP = PaperNumber(
    4.51, f"{PAC} README, Lumina-mGPT COCO: step compression"
)
SJD_PAC_STEP_PARTI = PaperNumber(
    4.62, f"{PAC}, SJD-PAC README, Lumina-mGPT Parti: step compression"
)

# The paper's analyses this package does not reproduce, with the reason: the one list (notebook
# 04 shows it; the claims ledger, `ledger.ledger`, lists them as "not run").
NOT_REPRODUCED_COLUMNS = ["analysis", "paper", "why not here"]
NOT_REPRODUCED = [
    {
        "id": "fig3_tsne_embeddings",
        "analysis": "Fig. 3: t-SNE of the token embeddings",
        "paper": "spread almost uniformly, hence no natural static clusters "
        f"({GSD}, figures; which table and how many points: not found)",
        "why not here": "a picture of Lumina-mGPT's embeddings says nothing about the stand-in's; "
        "the claim's consequence is tested instead: Table 2 (A), static k-means clusters "
        "of the input embeddings, against the dynamic rule (notebook 04)",
    },
    {
        "id": "fig8_token_context",
        "analysis": "Fig. 8: one token decodes to different pixels by context",
        "paper": "token similarity depends on context, so static clusters "
        f"fit poorly ({GSD}, figures; details not found)",
        "why not here": "the stand-in decodes each code to a fixed patch (no context by "
        "construction), and Lumina-mGPT's VQGAN decoder "
        "needs weights that cannot be downloaded here",
    },
    {
        "id": "text_model_contrast",
        "analysis": "the text-model contrast: SD acceptance about 70% in LLMs against "
        "about 40% in image models; top-1 histograms of a text model",
        "paper": f"{GSD}, introduction (which text model and data: not found)",
        "why not here": "no text LLM's weights can be downloaded here; notebook 05 computes "
        "acceptance = 1 - TV for any pair instead, and "
        "notebook 01 shows why flat pairs accept less",
    },
    {
        "id": "latency_speedup",
        "analysis": "latency (seconds per image) and latency speed-ups",
        "paper": f"Table 1: 4.65x latency at 3.76x NFE on Parti ({GSD}), on an A100",
        "why not here": "CPU wall time of a small model is noise-dominated and says nothing about "
        "a 7B model on a GPU: NFE is the hardware-independent cost (docs/lumina-mgpt.md "
        "section 5 has per-forward GPU times of the 7B shapes with random weights)",
    },
    {
        "id": "coco_fid_clip",
        "analysis": "MS-COCO FID and CLIP (5,000 captions)",
        "paper": f"Table 1, COCO rows: GSD (G=25) FID 33.55, CLIP 31.24 ({GSD})",
        "why not here": "needs Lumina-mGPT on a GPU, the 5,000 COCO images and captions and the "
        "Inception weights, none of which can be downloaded here; scripts/gpu_reproduce.sh "
        "runs the Parti-style CLIP evaluation when the weights are present",
    },
]
