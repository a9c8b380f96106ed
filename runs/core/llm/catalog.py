"""Known models and their context windows.

The context window drives compaction, so when in doubt an entry is the *smaller* of the
plausible values: under-estimating compacts a little early, over-estimating makes the
endpoint refuse the request. Deployments that know better set `AGENTSITE_CONTEXT_WINDOW`,
which reaches `context_window_for` as `override` and always wins.

Names are matched case-insensitively, without an organisation prefix (`Qwen/Qwen2.5-7B`
is looked up as `qwen2.5-7b`): first exactly, then by the longest known prefix, so dated
snapshots (`gpt-4o-2024-08-06`) and local tags (`llama3.1:8b`) find their family.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

FALLBACK_CONTEXT_WINDOW = 8192
"""Used for a model the catalog does not know: small enough to be safe for any chat model."""

CONTEXT_WINDOWS: Mapping[str, int] = MappingProxyType(
    {
        # OpenAI
        "gpt-5": 400_000,
        "gpt-4.5-preview": 128_000,
        "gpt-4.1": 1_047_576,
        "gpt-4.1-mini": 1_047_576,
        "gpt-4.1-nano": 1_047_576,
        "gpt-4o": 128_000,
        "gpt-4o-mini": 128_000,
        "chatgpt-4o-latest": 128_000,
        "gpt-4-turbo": 128_000,
        "gpt-4-1106-preview": 128_000,
        "gpt-4-0125-preview": 128_000,
        "gpt-4-32k": 32_768,
        "gpt-4": 8_192,
        "gpt-3.5-turbo": 16_385,
        "gpt-3.5-turbo-instruct": 4_096,
        "o1": 200_000,
        "o1-mini": 128_000,
        "o1-preview": 128_000,
        "o3": 200_000,
        "o3-mini": 200_000,
        "o4-mini": 200_000,
        # DeepSeek: 64K is what older deployments served; newer ones serve 128K (override).
        "deepseek-chat": 64_000,
        "deepseek-reasoner": 64_000,
        "deepseek-coder": 128_000,
        "deepseek-r1": 128_000,
        "deepseek-v3": 128_000,
        # Qwen: open weights are 32K natively (longer only with YaRN scaling turned on).
        "qwen": 32_768,
        "qwen2": 32_768,
        "qwen2.5": 32_768,
        "qwen3": 32_768,
        "qwen-max": 32_768,
        "qwen-plus": 131_072,
        "qwen-turbo": 1_000_000,
        "qwq": 131_072,
        # Llama, under both the Ollama (`llama3.1:8b`) and Hugging Face (`Llama-3.1-8B`) spellings.
        "llama2": 4_096,
        "llama-2": 4_096,
        "llama3": 8_192,
        "llama-3": 8_192,
        "llama3.1": 131_072,
        "llama-3.1": 131_072,
        "llama3.2": 131_072,
        "llama-3.2": 131_072,
        "llama3.3": 131_072,
        "llama-3.3": 131_072,
        # Other common open-weight families.
        "mistral": 32_768,
        "mixtral": 32_768,
        "mistral-nemo": 128_000,
        "gemma2": 8_192,
        "gemma-2": 8_192,
        "gemma3": 131_072,
        "gemma-3": 131_072,
        "phi3": 4_096,
        "phi-3": 4_096,
        "phi4": 16_384,
        "phi-4": 16_384,
    }
)


def normalize_model_name(name: str) -> str:
    """The catalog key for a model name: lower case, without an `org/` prefix."""
    return name.strip().rsplit("/", 1)[-1].lower()


def known_context_window(name: str) -> int | None:
    """The catalog's window for `name` (exact match, then longest prefix), or None."""
    key = normalize_model_name(name)
    if not key:
        return None
    exact = CONTEXT_WINDOWS.get(key)
    if exact is not None:
        return exact
    prefixes = [known for known in CONTEXT_WINDOWS if key.startswith(known)]
    if not prefixes:
        return None
    return CONTEXT_WINDOWS[max(prefixes, key=len)]


def context_window_for(name: str, override: int | None) -> int:
    """The context window to plan with for model `name`.

    `override` (the `AGENTSITE_CONTEXT_WINDOW` setting) wins when given; otherwise the
    catalog's entry, otherwise `FALLBACK_CONTEXT_WINDOW`.
    """
    if override is not None:
        if override <= 0:
            raise ValueError(f"context window override must be positive, got {override!r}")
        return override
    known = known_context_window(name)
    return known if known is not None else FALLBACK_CONTEXT_WINDOW
