"""Local GGUF embeddings with llama-cpp-python (imported lazily, only here).

One Llama instance per model/settings per process, shared by every provider
object and guarded by a lock: llama contexts are not thread-safe and loading
twice would double the memory. Input over ``local.maxInputTokens`` is cut by
the model's own tokenizer, so the service never splits texts for this provider.
"""

from __future__ import annotations

import importlib.util
import os
import re
import atexit
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Self

from memindex.pipeline.config import environ
from memindex.pipeline.embeddings import registry
from memindex.pipeline.embeddings.base import EmbeddingProvider, InvalidVectorError, ProviderError
from memindex.pipeline.embeddings.providers.hf_download import HF_BASE_URL, ensure_model_file, is_remote_model
from memindex.pipeline.embeddings.registry import ProviderArgs

N_CTX = 512  # n_batch = n_ubatch = n_ctx: each input must fit one batch
THREADS_ENV = environ.LOCAL_THREADS.name  # llama.cpp threads per model; unset: threads_default()
MAX_DEFAULT_THREADS = 4  # more bought nothing for a 384-dimension embedder


def available_cpus(cgroup_root: str = "/sys/fs/cgroup") -> int:
    """CPUs this process may actually use: its affinity mask (taskset, a container's cpuset),
    capped by the cgroup v2 CPU quota (``cpu.max`` of its cgroup and every ancestor: a container
    with ``--cpus 1.5`` on a 16-core host gets 2). ``os.cpu_count()`` counts the host's cores,
    and llama.cpp threads beyond the CPUs there are spin at their barriers while the scheduler
    runs someone else: 2 threads on an oversubscribed 2-core machine ran ~4x slower than 1."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cpus = os.cpu_count() or 1
    quota = _cgroup_quota(cgroup_root)
    return max(1, min(cpus, quota) if quota is not None else cpus)


def _cgroup_quota(root: str) -> int | None:
    """The tightest ``cpu.max`` quota on this process's cgroup v2 path, in whole CPUs (rounded up),
    or None: no cgroup v2, or no quota ("max") anywhere on the path."""
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as fh:
            rel = next((line.strip()[3:] for line in fh if line.startswith("0::")), None)
    except OSError:
        return None
    if rel is None:
        return None
    best, path = None, Path(root, rel.lstrip("/"))
    for directory in (path, *path.parents):
        if not str(directory).startswith(root):
            break
        try:
            quota, period = (directory / "cpu.max").read_text().split()[:2]
        except (OSError, ValueError):
            continue
        if quota != "max" and int(period) > 0:
            n = -(-int(quota) // int(period))  # ceil: 1.5 CPUs of quota is work for 2 threads
            best = n if best is None else min(best, n)
    return best


# How many processes of this command load a model each (`memindex worker --processes N` sets it
# for its dramatiq processes): they share the CPUs.
PROCESSES_ENV = environ.WORKER_PROCESSES.name


def threads_default() -> int:
    """llama.cpp's thread count: ``MEMINDEX_LOCAL_THREADS`` when set, else the CPUs available
    to this process (``available_cpus``) shared by the command's worker processes, at least 1
    and at most ``MAX_DEFAULT_THREADS``.

    Shared, because each worker process loads its own model: the Procfile's `compute` line (2
    processes) took 2 threads each on a 2-core machine, 4 spinning threads for 2 CPUs. Not fewer
    than the CPUs: with short notes in one process (the embedded default, tests/
    test_embedding_pipeline.py's fallback) 2 threads indexed in 88 s what 1 did not in 120 s,
    while for 400-token chunks beside busy neighbours 1 thread ran 2.6-10x faster than 2
    (bench/README.md): on a machine shared with other busy work, set it to 1."""
    given = environ.LOCAL_THREADS.get()
    if given is not None:
        return int(given)
    processes = environ.WORKER_PROCESSES.get()
    return max(1, min(MAX_DEFAULT_THREADS, available_cpus() // processes))


def llama_available() -> bool:
    """Whether llama-cpp-python is installed (checked without importing it)."""
    return importlib.util.find_spec("llama_cpp") is not None


def _local_settings(ms: Mapping[str, Any]) -> Mapping[str, Any]:
    local = ms.get("local")
    return local if isinstance(local, dict) else {}


def auto_reason(ms: Mapping[str, Any]) -> str | None:
    """Why provider "auto" picks local: local.modelPath is a file on disk (an hf: URI never is:
    it would need a download)."""
    path = _local_settings(ms).get("modelPath")
    if path and not is_remote_model(path) and Path(path).expanduser().is_file():
        return "local.modelPath exists"
    return None


def auto_missing(ms: Mapping[str, Any]) -> str:
    """Why ``auto_reason`` said no, for the keyword-only reason ``index`` and ``status`` show."""
    path = _local_settings(ms).get("modelPath")
    if not path:
        return "no local.modelPath"
    if is_remote_model(path):
        return f"local.modelPath {path} is a download (auto takes a model file already on disk)"
    return f"no file at local.modelPath {path}"


@dataclass
class _Loaded:
    llm: Any
    lock: threading.Lock
    dims: int
    n_special: int  # tokens the tokenizer adds around every input ([CLS]/[SEP], BOS/EOS)


_MODELS: dict[tuple[Any, ...], _Loaded] = {}
_MODELS_LOCK = threading.Lock()


def _close_models() -> None:
    """Free models before interpreter teardown (Llama.__del__ fails once modules are gone)."""
    with _MODELS_LOCK:
        for loaded in _MODELS.values():
            try:
                loaded.llm.close()
            except Exception:  # noqa: BLE001 - best effort at exit
                pass
        _MODELS.clear()


atexit.register(_close_models)


def _load(path: Path, n_threads: int) -> _Loaded:
    key = (str(path.resolve()), N_CTX, n_threads, True)
    with _MODELS_LOCK:
        loaded = _MODELS.get(key)
        if loaded is not None:
            return loaded
        try:
            from llama_cpp import Llama
        except ImportError as exc:
            raise ProviderError("local: llama-cpp-python is not installed (pip install 'memindex[local]')") from exc
        try:
            llm = Llama(
                model_path=str(path), embedding=True, n_ctx=N_CTX, n_batch=N_CTX, n_ubatch=N_CTX,
                n_threads=n_threads, n_threads_batch=n_threads, flash_attn=True, verbose=False,
            )
        except (ValueError, RuntimeError, OSError) as exc:
            raise ProviderError(f"local: cannot load model {path}: {exc}") from exc
        n_special = len(llm.tokenize(b"x", add_bos=True)) - len(llm.tokenize(b"x", add_bos=False))
        loaded = _Loaded(llm, threading.Lock(), int(llm.n_embd()), max(0, n_special))
        _MODELS[key] = loaded
        return loaded


def model_family(model: str) -> str:
    """The model a GGUF path or hf:/URL reference names, without directory, quantisation or
    extension (``.../all-MiniLM-L6-v2.F16.gguf`` -> ``all-minilm-l6-v2``): the key of the
    registry's per-model input limits."""
    name = model.replace("\\", "/").rsplit("/", 1)[-1].split(".", 1)[0].lower()
    return _QUANT_SUFFIX.sub("", name)


_QUANT_SUFFIX = re.compile(r"[-_](?:f16|f32|bf16|q\d\w*|iq\d\w*)$")


class LocalProvider(EmbeddingProvider):
    id = "local"
    self_truncates = True

    def __init__(
        self,
        model_path: str | None,
        cache_dir: str | os.PathLike[str],
        *,
        max_input_tokens: int | None = None,
        n_threads: int | None = None,
        hf_base_url: str = HF_BASE_URL,
        hf_token: str | None = None,
        max_batch_items: int = 32,
    ) -> None:
        super().__init__()
        self.model = (model_path or registry.get(self.id).default_model).strip()
        self.cache_dir = Path(cache_dir).expanduser()
        self.max_input_tokens = int(max_input_tokens or registry.max_input_tokens(self.id, model_family(self.model)))
        self.n_threads = n_threads or threads_default()
        self.max_batch_items = max_batch_items
        self.max_batch_tokens = 10**9  # llama packs a list into n_batch-sized decodes itself
        self._hf_base_url = hf_base_url
        self._secret = hf_token
        self._loaded: _Loaded | None = None
        self._init_lock = threading.Lock()

    @classmethod
    def from_args(cls, args: ProviderArgs) -> Self:
        """From memorySearch.local.*; ``args.api_key`` is the Hugging Face token (HF_TOKEN) for hf: models."""
        local = _local_settings(args.memory_search)
        path = local.get("modelPath") or None
        if path and not is_remote_model(path) and not Path(path).expanduser().is_file():
            raise ProviderError(f"local: model file not found: {path}")
        if not llama_available():
            raise ProviderError("local: llama-cpp-python is not installed (pip install 'memindex[local]')")
        return cls(
            path or args.model,
            local.get("modelCacheDir") or args.cache_dir,
            max_input_tokens=local.get("maxInputTokens"),
            hf_base_url=args.hf_base_url or HF_BASE_URL,
            hf_token=args.api_key,
        )

    def fingerprint_extra(self) -> Mapping[str, Any]:
        return {"maxInputTokens": self.max_input_tokens}

    def model_file(self) -> Path:
        """The GGUF on disk, downloading an hf:/http(s) model into the cache first."""
        if is_remote_model(self.model):
            return ensure_model_file(self.model, self.cache_dir, hf_base_url=self._hf_base_url, token=self._secret)
        path = Path(self.model).expanduser()
        if not path.is_file():
            raise ProviderError(f"local: model file not found: {path}")
        return path

    def _model(self) -> _Loaded:
        with self._init_lock:
            if self._loaded is None:
                self._loaded = _load(self.model_file(), self.n_threads)
                self.dims = self._loaded.dims
            return self._loaded

    def truncate(self, text: str) -> str:
        """text cut to max_input_tokens model tokens (specials included)."""
        m = self._model()
        budget = max(1, min(self.max_input_tokens, N_CTX) - m.n_special)
        with m.lock:
            tokens = m.llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
            keep = budget
            for _ in range(8):
                if len(tokens) <= budget:
                    break
                text = m.llm.detokenize(tokens[:keep]).decode("utf-8", errors="ignore")
                # Detokenising can re-tokenise a little longer (merges at the cut); shrink until it fits.
                tokens = m.llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
                keep = max(1, keep - max(1, len(tokens) - budget))
        # Whatever remains over the limit is cut by llama's own n_batch truncation.
        return text

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        m = self._model()
        inputs = [self.truncate(t) for t in texts]
        with m.lock:
            try:
                raw = m.llm.embed(inputs, normalize=True, truncate=True)
            except (ValueError, RuntimeError) as exc:
                raise InvalidVectorError(f"local: embedding failed: {exc}") from exc
        # lazy: numpy (via validate) only once vectors exist: `auto` imports this module just to read
        # auto_reason on every sync, including no-change resyncs that never embed (~150 ms).
        from memindex.pipeline.embeddings.validate import sanitize_and_normalize

        return [sanitize_and_normalize(v) for v in raw]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]
