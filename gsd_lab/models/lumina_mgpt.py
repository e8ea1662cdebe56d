"""Lumina-mGPT (Alpha-VLLM; Chameleon architecture) on stock ``transformers``,
as a decoding adapter.

Loading (``load_lumina_mgpt``): the released checkpoints are ``ChameleonForConditionalGeneration``
weights except for the q/k-norms, stored per model-parallel rank as [model_parallel_size, head_dim]
where transformers expects [num_heads, head_dim] (k: num_key_value_heads). We read the safetensors
shards ourselves, expand w -> w.repeat_interleave(num_heads / model_parallel_size, 0) (exactly the
fork's forward, which repeats each rank's row over its heads), and load strictly: any missing,
unexpected or mis-shaped key raises, except the image *encoder* ``model.vqmodel.*``, which the
releases drop and text-to-image generation never uses (it is not even allocated here).

Logits: stock ``ChameleonForConditionalGeneration.forward`` sets every image-token logit to the
dtype minimum, so logits are computed as ``lm_head(model.model(...).last_hidden_state)``.

Image layout (Lumina-mGPT ``FlexARItemProcessor``; ids of the 7B release in brackets, read here
from ``config.vocabulary_map`` by token name):

    prompt:  <s> "Generate an image of {W}x{H} according to the following prompt:\\n{caption}"
             <reserved08706>[8710] <racm3:break>[8197] <reserved{8800+g}>[h] <reserved{8800+g}>[w]
    image:   (w codes IMGIMG..Z [4..8195], <reserved08799>[8803]) x h, then <eoss>[8196]

with g = side / 32 grid cells and h = w = 2 g latent rows/columns (the VQGAN downsamples x16):
768 x 768 gives 48 x 48 codes + 48 row ends = 2352 generated tokens. The image start and size
tokens, which the model would emit itself, are part of the prompt, so the image size is fixed.

Sampling (GSD's reference settings): classifier-free guidance l = u + s (c - u) with s = 3.0; only
image codes allowed; top-k 2000; temperature 1.0; the row-end token forced at the end of every row.
All of it happens in the adapter, so verification sees exactly the distribution tokens are sampled
from. The unconditional row's prompt comes in two named variants (``UNCONDITIONAL_PROMPTS``):

    "gsd-release" (default)  <reserved08706> <racm3:break> h w   the GSD release (junhyukso/GSD,
                             whose Jacobi sampler comes from SJD) zeroes the attention mask over the
                             text prompt except its last token, <reserved08706>: use it to reproduce
                             the GSD paper's numbers;
    "alpha-vllm"             <racm3:break> h w                   Alpha-VLLM's Lumina-mGPT
                             ``inference_solver.py`` runs the unconditional sequence from the last
                             image start (its CFG logits processor slices ``input_ids[:, BOI:]``).

Neither is "the" Lumina-mGPT reference: the first is the GSD fork's choice, the second the model
authors' own inference code. Loading is strict: a key in two shards, a key the index puts in
another shard, and q/k-norms in a layout the config does not name raise ``ValueError``
(``expand_qk_norm``, ``stores_expanded_qk_norms``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import torch
from torch import Tensor

from .adapter import cache_kwarg
from .grid_image import GridImageAdapter
from .loading import device_and_dtype, find_checkpoint, refuse_large_on_cpu
from .lumina_tokenizer import PromptTokenizer, find_tokenizer_file

logger = logging.getLogger(__name__)

HF_REPO_TEMPLATE = "Alpha-VLLM/Lumina-mGPT-7B-{resolution}"
PROMPT_TEMPLATE = (
    "Generate an image of {width}x{height} according to the following prompt:\n{prompt}"
)
PIXELS_PER_GRID = (
    32  # Lumina-mGPT's size tokens count 32-pixel cells; the VQGAN maps 16 px to one code
)
PIXELS_PER_CODE = 16
IMAGE_ENCODER_PREFIX = "model.vqmodel."
CPU_PARAMETER_LIMIT = 1_000_000_000  # above this, loading on CPU needs force_cpu=True

# Token names (Chameleon vocabulary), so tiny test vocabularies with the same names work unchanged.
BOS_NAME = "<s>"
END_OF_TURN_NAME = "<reserved08706>"
IMAGE_START_NAME = "<racm3:break>"
IMAGE_END_NAME = "<eoss>"
ROW_END_NAME = "<reserved08799>"


# The unconditional (CFG) row's prompt, by name: tokens before the first generated code.
GSD_RELEASE_UNCONDITIONAL = "gsd-release"
ALPHA_VLLM_UNCONDITIONAL = "alpha-vllm"
UNCONDITIONAL_PROMPTS = (GSD_RELEASE_UNCONDITIONAL, ALPHA_VLLM_UNCONDITIONAL)


def grid_token_name(cells: int) -> str:
    """Name of the size token for ``cells`` grid cells: <reserved{8800 + cells:05d}>
    (id 8804 + cells)."""
    return f"<reserved{8800 + cells:05d}>"


# ---- locating the weights ---------------------------------------------------------------------


def resolve_weights_dir(weights: str | Path | None, resolution: int = 768) -> Path:
    """The folder holding ``config.json`` and the safetensors shards: ``weights`` itself, a
    Hugging Face cache entry (``models--Alpha-VLLM--Lumina-mGPT-7B-768``) or a cache root holding
    one; None searches the Hugging Face cache (``loading.find_checkpoint``)."""
    return find_checkpoint(weights, HF_REPO_TEMPLATE.format(resolution=resolution), "Lumina-mGPT")


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads`` hook: a JSON object with a repeated key is an error (not "last one wins")."""
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError(f"key {key!r} appears twice in one JSON object")
        seen[key] = value
    return seen


def _safetensors_index(folder: Path) -> dict[str, str] | None:
    """The index's ``weight_map`` (tensor name -> shard file name), or None without an index."""
    index = folder / "model.safetensors.index.json"
    if not index.is_file():
        return None
    try:
        weight_map = json.loads(index.read_text(), object_pairs_hook=_no_duplicate_keys).get(
            "weight_map"
        )
    except ValueError as error:
        raise ValueError(f"{index}: {error}") from error
    if not isinstance(weight_map, dict) or not weight_map:
        raise ValueError(f"{index} has no weight_map")
    return weight_map


def _safetensors_files(folder: Path) -> list[Path]:
    weight_map = _safetensors_index(folder)
    if weight_map is not None:
        files = sorted({folder / name for name in weight_map.values()})
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise FileNotFoundError(
                f"{folder / 'model.safetensors.index.json'} "
                f"lists shards that are not there: {missing}"
            )
        return files
    if (folder / "model.safetensors").is_file():
        return [folder / "model.safetensors"]
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(
            f"no *.safetensors weights in {folder} (only safetensors checkpoints are supported)"
        )
    return files


# ---- loading ------------------------------------------------------------------------------------


def read_lumina_config(folder: Path) -> Any:
    """``ChameleonConfig`` from ``config.json`` (model_type chameleon; extra Lumina keys kept)."""
    from transformers import ChameleonConfig

    raw = json.loads((folder / "config.json").read_text())
    if raw.get("model_type") != "chameleon":
        raise ValueError(
            f"{folder / 'config.json'} has model_type {raw.get('model_type')!r}; "
            "Lumina-mGPT is 'chameleon'"
        )
    if not raw.get("vocabulary_map"):
        raise ValueError(
            f"{folder / 'config.json'} has no vocabulary_map (needed for the image token ids)"
        )
    config = ChameleonConfig.from_pretrained(str(folder))
    if getattr(config, "mask_image_logits", False):
        logger.info(
            "config.mask_image_logits is true; ignored: logits are computed from the backbone"
        )
    return config


# Stock transformers classes: checkpoints saved from them (or by transformers' Chameleon
# converter) hold q/k-norms already expanded to [heads, head_dim].
TRANSFORMERS_ARCHITECTURES = ("ChameleonForConditionalGeneration", "ChameleonModel")


def stores_expanded_qk_norms(config: Any) -> bool:
    """True when config.json's ``architectures`` names a stock transformers Chameleon class: its
    q/k-norms are stored as [heads, head_dim]. Otherwise (Lumina-mGPT's
    ``ChameleonXLLMXForConditionalGeneration``, or no architectures) they are stored per
    model-parallel rank, [model_parallel_size, head_dim]. ``model_parallel_size`` itself cannot
    tell: transformers' ChameleonConfig defaults it to 1 and its converter saves it."""
    return bool(set(getattr(config, "architectures", None) or ()) & set(TRANSFORMERS_ARCHITECTURES))


def _model_parallel_size(config: Any) -> int:
    return int(getattr(config, "model_parallel_size", None) or 1)


def estimated_parameters(config: Any, *, expanded_qk_norms: bool = False) -> int:
    """Parameter count of the text model from the config, norms included.

    Per layer: attention 2 d^2 + 2 d d_kv (q, o; k, v), MLP 3 d f, two RMSNorm weights 2 d, and the
    q/k-norm weights and biases 2 (r_q + r_k) h_d; plus embeddings and untied head 2 V d and the
    final norm d. The q/k-norm rows r are as stored (``expanded_qk_norms=False``: r_q = r_k =
    model_parallel_size for Lumina's layout, the head counts for a transformers checkpoint, see
    ``stores_expanded_qk_norms``) or as loaded (``True``: r_q = heads, r_k = kv heads).
    Lumina-mGPT 7B: 7,013,158,912 stored, 7,013,666,816 loaded (model.vqmodel.* not counted)."""
    d, layers, ffn = config.hidden_size, config.num_hidden_layers, config.intermediate_size
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    head_dim = d // heads
    kv = kv_heads * head_dim
    if expanded_qk_norms or stores_expanded_qk_norms(config):
        qk_rows = heads + kv_heads
    else:
        qk_rows = 2 * _model_parallel_size(config)
    per_layer = 2 * d * d + 2 * d * kv + 3 * d * ffn + 2 * d + 2 * qk_rows * head_dim
    return 2 * config.vocab_size * d + layers * per_layer + d


def expand_qk_norm(name: str, tensor: Tensor, config: Any) -> Tensor:
    """A stored q/k-norm weight or bias -> transformers' [heads, head_dim] (heads = kv heads for k).

    Lumina's layout (the default): the tensor must be [r, head_dim], r = config
    ``model_parallel_size``, and becomes t.repeat_interleave(heads / r, 0), as the Lumina fork's
    forward does. Only when config.json's ``architectures`` names a stock transformers class
    (``stores_expanded_qk_norms``) must it already be [heads, head_dim]. Any other shape raises
    ``ValueError``: no guessing the layout from the shape."""
    heads = config.num_attention_heads if ".q_norm." in name else config.num_key_value_heads
    head_dim = config.hidden_size // config.num_attention_heads
    if stores_expanded_qk_norms(config):
        if tuple(tensor.shape) != (heads, head_dim):
            raise ValueError(
                f"{name}: shape {tuple(tensor.shape)}; config.json's architectures "
                f"{config.architectures} is stock transformers, whose layout [heads={heads}, "
                f"head_dim={head_dim}] is expected (Lumina's per-rank q/k-norms need Lumina's "
                "architectures, ChameleonXLLMXForConditionalGeneration)"
            )
        return tensor
    ranks = _model_parallel_size(config)
    if heads % ranks:
        raise ValueError(
            f"config model_parallel_size={ranks} does not divide the {heads} heads of {name}"
        )
    if tuple(tensor.shape) != (ranks, head_dim):
        looks_expanded = ranks != heads and tuple(tensor.shape) == (heads, head_dim)
        raise ValueError(
            f"{name}: shape {tuple(tensor.shape)}; config.json says model_parallel_size={ranks}, "
            f"so Lumina's per-rank layout [{ranks}, head_dim={head_dim}] is expected"
            + (
                " (this looks like transformers' expanded [heads, head_dim] layout: set "
                'config.json\'s architectures to ["ChameleonForConditionalGeneration"] if the '
                "weights are stored that way)"
                if looks_expanded
                else ""
            )
        )
    return tensor.repeat_interleave(heads // ranks, dim=0)


def _open_shard(file: Path, device: str | torch.device) -> Any:
    """``safe_open`` of one shard; a file safetensors cannot read (truncated by an interrupted
    download, or not safetensors at all) raises ``ValueError`` naming it."""
    from safetensors import SafetensorError, safe_open

    try:
        return safe_open(str(file), framework="pt", device=str(device))
    except SafetensorError as error:
        raise ValueError(
            f"{file} is not a readable safetensors file ({error}; {file.stat().st_size:,} bytes): "
            "an interrupted download? Download it again"
        ) from error


def stored_tensors(
    folder: Path, *, device: str | torch.device = "cpu"
) -> Iterator[tuple[str, str, Any]]:
    """(name, shard file name, open ``safe_open`` handle) for every tensor of the safetensors
    shards, file by file; use the handle before asking for the next item.

    Raises ``ValueError`` when a shard cannot be read (``_open_shard``), a tensor name is stored in
    two shards (no "last one wins"), or the index puts a tensor in another shard than the one
    holding it or lists one no shard holds."""
    weight_map = _safetensors_index(folder)
    stored_in: dict[str, str] = {}
    for file in _safetensors_files(folder):
        with _open_shard(file, device) as handle:
            for name in handle.keys():  # noqa: SIM118 (safe_open handles are not iterable)
                if name in stored_in:
                    raise ValueError(
                        f"tensor {name} is stored in two shards, {stored_in[name]} and {file.name}"
                    )
                stored_in[name] = file.name
                if weight_map is not None and weight_map.get(name) != file.name:
                    raise ValueError(
                        f"tensor {name} is stored in {file.name} but the index says "
                        f"{weight_map.get(name, 'nothing about it')}"
                    )
                yield name, file.name, handle
    if weight_map is not None:
        absent = sorted(set(weight_map) - set(stored_in))
        if absent:
            raise ValueError(f"the index lists {len(absent)} tensors no shard holds: {absent[:6]}")


def is_qk_norm(name: str) -> bool:
    return ".self_attn.q_norm." in name or ".self_attn.k_norm." in name


def read_lumina_state_dict(
    folder: Path, config: Any, *, device: str | torch.device, dtype: torch.dtype
) -> dict[str, Tensor]:
    """All text-model tensors of the safetensors shards, on ``device`` in ``dtype``, q/k-norms
    expanded; ``model.vqmodel.*`` tensors, if any, are skipped (never read). The shards are
    checked as they are read (``stored_tensors``)."""
    state: dict[str, Tensor] = {}
    skipped = 0
    for name, _, handle in stored_tensors(folder, device=device):
        if name.startswith(IMAGE_ENCODER_PREFIX):
            skipped += 1
            continue
        tensor = handle.get_tensor(name)
        if is_qk_norm(name):
            tensor = expand_qk_norm(name, tensor, config)
        state[name] = tensor.to(dtype=dtype) if tensor.is_floating_point() else tensor
    if skipped:
        logger.info(
            "skipped %d model.vqmodel.* tensors (image encoder; not needed to generate images)",
            skipped,
        )
    return state


def meta_lumina_model(config: Any) -> Any:
    """``ChameleonForConditionalGeneration(config)`` on the meta device (no memory), without the
    image encoder (absent from Lumina releases, unused for generation)."""
    from transformers import ChameleonForConditionalGeneration

    with torch.device("meta"):
        model = ChameleonForConditionalGeneration(config)
    model.model.vqmodel = None
    return model


def architecture_mismatch(
    expected: dict[str, tuple[int, ...]], stored: dict[str, tuple[int, ...]]
) -> str | None:
    """None when ``stored`` (name -> shape, q/k-norms as loaded) has exactly the tensors of
    ``expected``, else what differs: missing, unexpected and mis-shaped names (first few)."""
    missing = sorted(set(expected) - set(stored))
    unexpected = sorted(set(stored) - set(expected))
    wrong_shape = [
        f"{k} {tuple(stored[k])} (expected {tuple(v)})"
        for k, v in expected.items()
        if k in stored and tuple(stored[k]) != tuple(v)
    ]
    if not (missing or unexpected or wrong_shape):
        return None
    return (
        f"missing {len(missing)} {missing[:6]}, unexpected {len(unexpected)} {unexpected[:6]}, "
        f"wrong shape {len(wrong_shape)} {wrong_shape[:4]}"
    )


def build_lumina_model(config: Any, state: dict[str, Tensor], *, device: str | torch.device) -> Any:
    """A ``ChameleonForConditionalGeneration`` built on the meta device, without the image encoder,
    whose parameters *are* the tensors of ``state``
    (strict: every key must match in name and shape)."""
    from transformers.models.chameleon.modeling_chameleon import ChameleonRotaryEmbedding

    model = meta_lumina_model(config)
    problem = architecture_mismatch(
        {k: tuple(v.shape) for k, v in model.state_dict().items()},
        {k: tuple(v.shape) for k, v in state.items()},
    )
    if problem:
        raise ValueError(
            "the checkpoint does not match the Chameleon "
            f"architecture of its config.json: {problem}"
        )
    model.load_state_dict(state, strict=True, assign=True)
    logger.info(
        "model.vqmodel.* (image encoder) not loaded: Lumina-mGPT "
        "releases drop it; generation does not use it"
    )
    model.model.rotary_emb = ChameleonRotaryEmbedding(config).to(
        device
    )  # non-persistent buffers, never saved
    on_meta = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if on_meta:
        raise ValueError(f"tensors left uninitialised after loading: {on_meta[:6]}")
    return model.eval()


# ---- image layout --------------------------------------------------------------------------------


@dataclass(frozen=True)
class LuminaImageLayout:
    """Token ids and geometry of one square image (see the module docstring)."""

    resolution: int
    latent_side: int  # codes per row = rows = resolution / 16
    bos: int
    end_of_turn: int
    image_start: int
    image_end: int
    row_end: int
    size_token: int

    @property
    def height(self) -> int:
        """Latent rows (= latent_side), as ``grid_image.GridLayout``."""
        return self.latent_side

    width = height  # codes per latent row

    @property
    def tail(self) -> tuple[int, int]:
        """Tokens forced after the last row: the image end, then end of turn (repeated)."""
        return (self.image_end, self.end_of_turn)

    @property
    def row_length(self) -> int:
        """Tokens per latent row including its row-end token."""
        return self.latent_side + 1

    @property
    def num_image_tokens(self) -> int:
        """Codes plus row ends: latent_side * (latent_side + 1) (2352 at 768 x 768)."""
        return self.latent_side * self.row_length

    @property
    def header(self) -> list[int]:
        """Tokens after the text: end of turn, image start, height and width size tokens."""
        return [self.end_of_turn, self.image_start, self.size_token, self.size_token]

    @classmethod
    def from_vocabulary(
        cls, vocabulary_map: dict[str, int], resolution: int, bos: int | None = None
    ) -> LuminaImageLayout:
        if (
            not isinstance(resolution, int)
            or resolution < PIXELS_PER_GRID
            or resolution % PIXELS_PER_GRID
        ):
            raise ValueError(
                f"resolution must be a positive multiple of {PIXELS_PER_GRID} "
                f"pixels, got {resolution!r}"
            )
        grid = resolution // PIXELS_PER_GRID
        names = {
            "bos": BOS_NAME,
            "end_of_turn": END_OF_TURN_NAME,
            "image_start": IMAGE_START_NAME,
            "image_end": IMAGE_END_NAME,
            "row_end": ROW_END_NAME,
            "size_token": grid_token_name(grid),
        }
        absent = [
            name
            for key, name in names.items()
            if name not in vocabulary_map and not (key == "bos" and bos is not None)
        ]
        if absent:
            raise ValueError(
                f"the vocabulary_map lacks the tokens {absent} "
                f"(needed for {resolution}x{resolution} images)"
            )
        ids = {key: vocabulary_map[name] for key, name in names.items() if name in vocabulary_map}
        if bos is not None:
            ids["bos"] = bos
        return cls(resolution=resolution, latent_side=resolution // PIXELS_PER_CODE, **ids)


LAYOUT_TOKEN_NAMES = (BOS_NAME, END_OF_TURN_NAME, IMAGE_START_NAME, IMAGE_END_NAME, ROW_END_NAME)


def tokenizer_mismatches(tokenizer: Any, vocabulary_map: dict[str, int]) -> list[str]:
    """Where ``tokenizer`` and the checkpoint's ``vocabulary_map`` disagree: one line per layout
    token (BOS, end of turn, image start/end, row end) and size token the map holds whose id
    in the tokenizer differs (or is absent), and the BOS id. Empty when they agree."""
    names = [n for n in LAYOUT_TOKEN_NAMES if n in vocabulary_map]
    names += sorted(n for n in vocabulary_map if n.startswith("<reserved088"))
    problems = [
        f"{name}: {tokenizer.token_to_id(name)} in the tokenizer, {vocabulary_map[name]} in the "
        "vocabulary_map"
        for name in names
        if tokenizer.token_to_id(name) != vocabulary_map[name]
    ]
    bos = tokenizer.bos_token_id
    if bos is not None and BOS_NAME in vocabulary_map and bos != vocabulary_map[BOS_NAME]:
        problems.append(
            f"BOS: {bos} in the tokenizer, {vocabulary_map[BOS_NAME]} "
            f"({BOS_NAME}) in the vocabulary_map"
        )
    return problems


def check_tokenizer_matches(tokenizer: Any, vocabulary_map: dict[str, int]) -> None:
    """Raise ``ValueError`` when the tokenizer is not the one of these weights
    (``tokenizer_mismatches``)."""
    problems = tokenizer_mismatches(tokenizer, vocabulary_map)
    if problems:
        raise ValueError(
            f"{getattr(tokenizer, 'path', 'the tokenizer')} does not match the checkpoint's "
            f"vocabulary_map ({len(problems)} tokens differ: {'; '.join(problems[:4])}): wrong "
            "--tokenizer for these weights?"
        )


def image_token_table(vocabulary_map: dict[str, int], vocab_size: int) -> tuple[Tensor, Tensor]:
    """Image-code ids (sorted) and a lookup table id -> VQ index (-1 for non-image ids), by name.

    Chameleon names VQ code n ``IMGIMG`` + the decimal digits of n written as letters A..J + one
    final letter; the VQ index is read from the name, never from an offset (as transformers'
    ``ChameleonImageVocabularyMapping.bpe2img``).
    """
    digits = {chr(ord("A") + i): str(i) for i in range(10)}
    table = torch.full((vocab_size,), -1, dtype=torch.long)
    for name, token in vocabulary_map.items():
        if name.startswith("IMGIMG"):
            code = "".join(digits.get(c, c) for c in name[len("IMGIMG") : -1])
            if not code.isdigit() or token >= vocab_size:
                raise ValueError(f"bad image token {name!r} -> {token} in the vocabulary_map")
            table[token] = int(code)
    ids = torch.nonzero(table >= 0).flatten()
    if ids.numel() == 0:
        raise ValueError("the vocabulary_map has no image tokens (names starting with IMGIMG)")
    codes = table[ids]
    if torch.unique(codes).numel() != codes.numel():
        raise ValueError("the vocabulary_map maps two tokens to the same VQ code")
    return ids, table


def chameleon_vocabulary_map(vocab_size: int, num_codes: int) -> dict[str, int]:
    """Chameleon's token names at their real ids (for a model built without its tokenizer):
    <s> <pad> </s> <unk>, IMGIMG codes at 4 .. 4 + num_codes - 1 (code = id - 4, named as
    ``image_token_table`` reads them), <eoss>, <racm3:break>, then <reservedNNNNN> = NNNNN + 4."""
    names = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for code in range(num_codes):
        names["IMGIMG" + "".join("ABCDEFGHIJ"[int(d)] for d in str(code)) + "Z"] = 4 + code
    names["<eoss>"], names["<racm3:break>"] = 4 + num_codes, 5 + num_codes
    for token in range(6 + num_codes, vocab_size):
        names[f"<reserved{token - 4:05d}>"] = token
    return names

# ---- prompts -------------------------------------------------------------------------------------


def prompt_text(layout: LuminaImageLayout, prompt: str) -> str:
    """The release's template around ``prompt`` at the layout's resolution."""
    return PROMPT_TEMPLATE.format(width=layout.resolution, height=layout.resolution, prompt=prompt)


def text_ids_to_prompt(layout: LuminaImageLayout, text_ids: Any) -> Tensor:
    """<s> + ``text_ids`` + [end of turn, image start, h, w] (1-D int64)."""
    text = [int(t) for t in torch.as_tensor(text_ids).flatten().tolist()]
    return torch.tensor([layout.bos, *text, *layout.header], dtype=torch.long)


def prompt_ids(tokenizer: Any, layout: LuminaImageLayout, prompt: str) -> Tensor:
    """<s> + ``tokenizer``'s ids of the templated prompt (no special tokens added) + [end of
    turn, image start, h, w]: what the model reads before the first image code."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError("prompt must be a non-empty string")
    return text_ids_to_prompt(
        layout, tokenizer.encode(prompt_text(layout, prompt), add_special_tokens=False)
    )


# ---- the adapter ---------------------------------------------------------------------------------


class LuminaMGPTAdapter(GridImageAdapter):
    """``GridImageAdapter`` for Lumina-mGPT text-to-image: logits from the backbone and ``lm_head``
    (no image-logit masking), image codes only, the row-end token forced at every row end, the
    image end after the last row and end of turn after it (``LuminaImageLayout.tail``), CFG /
    top-k / temperature as the GSD reference. ``unconditional_prompt``: "gsd-release" (default)
    or "alpha-vllm" (module docstring). vqgan: a ``ChameleonVQGANDecoder`` or None
    (``attach_vqgan`` later)."""

    def __init__(
        self,
        model: Any,
        layout: LuminaImageLayout,
        *,
        tokenizer: Any = None,
        vqgan: Any = None,
        top_k: int | None = 2000,
        temperature: float = 1.0,
        cfg_scale: float | None = 3.0,
        unconditional_prompt: str = GSD_RELEASE_UNCONDITIONAL,
    ) -> None:
        if unconditional_prompt not in UNCONDITIONAL_PROMPTS:
            raise ValueError(
                f"unconditional_prompt must be one of {UNCONDITIONAL_PROMPTS}, "
                f"got {unconditional_prompt!r}"
            )
        self.unconditional_prompt = unconditional_prompt
        _, table = image_token_table(model.config.vocabulary_map, model.config.vocab_size)
        super().__init__(
            model,
            layout,
            table,
            tokenizer=tokenizer,
            temperature=temperature,
            top_k=top_k,
            cfg_scale=cfg_scale,
        )
        self.bos = layout.bos
        self.vqgan = None
        if vqgan is not None:
            self.attach_vqgan(vqgan)
        # compute_logits calls the backbone directly: its own cache keyword, checked once here.
        self._backbone_cache_kwarg = cache_kwarg(model.model)

    @property
    def vq_index_of_token(self) -> Tensor:
        """int64 [V]: the VQ index of each image-code id, -1 elsewhere (``code_of_token``)."""
        return self.code_of_token

    def attach_vqgan(self, vqgan: Any) -> None:
        """Decode images with ``vqgan`` (a ``ChameleonVQGANDecoder``; its codebook is
        ``code_content``'s); raises ``ValueError`` when its codebook is smaller than the
        vocabulary's VQ codes (another model's VQGAN)."""
        codebook = getattr(getattr(vqgan, "config", None), "n_embed", None)
        if codebook is not None and int(self.code_of_token.max()) >= codebook:
            raise ValueError(
                f"the vocabulary has VQ codes up to {int(self.code_of_token.max())} but the "
                f"VQGAN codebook has {codebook} entries: wrong --vqgan for these weights?"
            )
        self.vqgan = vqgan
        self.decode_indices = vqgan.decode_to_uint8
        self._codebook = vqgan.quantize.embedding.weight

    # ---- prompts ----

    def prompt_text(self, prompt: str) -> str:
        return prompt_text(self.layout, prompt)

    def image_header(self) -> list[int]:
        """[end of turn, image start, h, w]: a prompt is <s> + text + this header."""
        return self.layout.header

    def unconditional_prompt_ids(self) -> Tensor:
        """The unconditional row's prompt (no text): [end of turn, image start, h, w] for
        "gsd-release" (the GSD release keeps <reserved08706>), [image start, h, w] for
        "alpha-vllm" (Lumina-mGPT's inference_solver starts the row at the image start)."""
        header = self.layout.header
        if self.unconditional_prompt == ALPHA_VLLM_UNCONDITIONAL:
            header = header[1:]
        return torch.tensor(header, dtype=torch.long)

    # ---- logits ----

    def compute_logits(
        self, input_ids: Tensor, attention_mask: Tensor | None, position_ids: Tensor, num_rows: int
    ) -> Tensor:
        """lm_head(backbone hidden states) of the last ``num_rows`` positions: [B, num_rows, V]
        (bypasses the stock forward, which masks every image-token logit)."""
        out = self.model.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=True,
            **{self._backbone_cache_kwarg: self.cache},
        )
        return self.model.lm_head(out.last_hidden_state[:, -num_rows:, :])


def load_lumina_mgpt(
    weights: str | Path | None,
    *,
    vqgan_dir: str | Path | None = None,
    resolution: int = 768,
    device: str | torch.device | None = None,
    dtype: torch.dtype | None = None,
    force_cpu: bool = False,
    top_k: int | None = 2000,
    temperature: float = 1.0,
    cfg_scale: float | None = 3.0,
    vqgan_dtype: torch.dtype = torch.float32,
    unconditional_prompt: str = GSD_RELEASE_UNCONDITIONAL,
    tokenizer: str | Path | None = None,
) -> LuminaMGPTAdapter:
    """Load a Lumina-mGPT checkpoint (local folder or Hugging Face cache) as a
    ``LuminaMGPTAdapter``.

    device, dtype, force_cpu: as ``loading.device_and_dtype`` and ``refuse_large_on_cpu`` (above
    1e9 parameters the CPU is refused). ``vqgan_dir``: folder with ``vqgan.yaml`` +
    ``vqgan.ckpt`` (optional; needed by ``decode_images``). ``unconditional_prompt``: the CFG
    row's prompt, "gsd-release" (default, reproduces the GSD paper) or "alpha-vllm".
    ``tokenizer``: a folder holding ``tokenizer.json`` (or the file); default the checkpoint's,
    else the 768 repo's next to it (``lumina_tokenizer.find_tokenizer_file``); prompts are
    tokenised by that file as written (``PromptTokenizer``). No tokenizer found raises
    ``FileNotFoundError`` naming what to download, before the weights are read.
    """
    if unconditional_prompt not in UNCONDITIONAL_PROMPTS:  # before any file is read
        raise ValueError(
            f"unconditional_prompt must be one of {UNCONDITIONAL_PROMPTS}, "
            f"got {unconditional_prompt!r}"
        )
    folder = resolve_weights_dir(weights, resolution)
    config = read_lumina_config(folder)
    device, dtype = device_and_dtype(device, dtype)
    refuse_large_on_cpu(
        folder, device, lambda: estimated_parameters(config), CPU_PARAMETER_LIMIT, force_cpu
    )
    layout = LuminaImageLayout.from_vocabulary(config.vocabulary_map, resolution)
    # Before the weights are read: a missing or wrong tokenizer fails before the long read.
    prompt_tokenizer = PromptTokenizer(find_tokenizer_file(folder, tokenizer))
    check_tokenizer_matches(prompt_tokenizer, config.vocabulary_map)
    state = read_lumina_state_dict(folder, config, device=device, dtype=dtype)
    model = build_lumina_model(config, state, device=device)
    del state
    needed = layout.num_image_tokens + 64
    if needed > config.max_position_embeddings:
        logger.warning(
            "an image needs about %d positions; config.max_position_embeddings is %d",
            needed,
            config.max_position_embeddings,
        )
    vqgan = None
    if vqgan_dir is not None:
        from .chameleon_vqgan import load_chameleon_vqgan

        vqgan = load_chameleon_vqgan(vqgan_dir, device=device, dtype=vqgan_dtype)
    return LuminaMGPTAdapter(
        model,
        layout,
        tokenizer=prompt_tokenizer,
        vqgan=vqgan,
        top_k=top_k,
        temperature=temperature,
        cfg_scale=cfg_scale,
        unconditional_prompt=unconditional_prompt,
    )
