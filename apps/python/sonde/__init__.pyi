# Type stubs of the sonde package (docs/python.md).
from types import SimpleNamespace
from typing import (Any, AsyncIterator, Callable, ContextManager, Dict, Generator, Iterator, List, Mapping, NamedTuple,
                    Optional, Sequence, Tuple, Union)

import numpy as np
import numpy.typing as npt

Ids = Union[Sequence[int], npt.NDArray[np.integer]]
Prompt = Union[str, Ids, Dict[str, Any]]
HookFn = Callable[[npt.NDArray[np.float32], SimpleNamespace], Optional[npt.ArrayLike]]

ROW_KINDS: Dict[int, str]

class Error(Exception): ...
class BadInput(Error, ValueError): ...
class RuntimeFailure(Error, RuntimeError): ...
class HookError(RuntimeFailure): ...

class HookPoint(NamedTuple):
    name: str
    shape: Tuple[int, ...]

class Token(NamedTuple):
    request: int
    token: int

class Step(NamedTuple):
    request: int
    step: int
    canvas: npt.NDArray[np.int32]

class Finished(NamedTuple):
    result: Generation

class Tokenizer:
    def encode(self, text: str) -> List[int]: ...
    def decode(self, ids: Ids, skip_special: bool = ...) -> str: ...

class Cache(Mapping[str, np.ndarray]):
    rows: Dict[str, np.ndarray]
    steps: List[Dict[str, Any]]
    hooks: List[HookPoint]
    def __getitem__(self, hook: str) -> np.ndarray: ...
    def __iter__(self) -> Iterator[str]: ...
    def __len__(self) -> int: ...
    def of_prompt(self, prompt: int, hook: str) -> np.ndarray: ...

class Generation:
    results: List[Dict[str, Any]]
    completions: List[Optional[str]]
    tokens: List[npt.NDArray[np.int32]]
    prompt_ids: List[npt.NDArray[np.int32]]
    finish_reasons: List[str]
    seeds: List[int]
    history: List[List[npt.NDArray[np.int32]]]
    cache: Cache

class Completion(NamedTuple):
    id: str
    prompt_ids: npt.NDArray[np.int32]
    tokens: npt.NDArray[np.int32]
    text: Optional[str]
    finish_reason: str
    seed: int
    history: List[npt.NDArray[np.int32]]
    acts: Dict[str, List[npt.NDArray[np.float32]]]
    forwards: int
    first_seconds: float
    end_seconds: float

# Iterating yields token ids (autoregressive) or int32 canvases (diffusion).
class Handle(Iterator[Any], AsyncIterator[Any]):
    @property
    def id(self) -> str: ...
    def done(self) -> bool: ...
    def cancel(self) -> bool: ...
    def result(self) -> Completion: ...
    def __iter__(self) -> Handle: ...
    def __next__(self) -> Any: ...
    def __aiter__(self) -> Handle: ...
    async def __anext__(self) -> Any: ...
    def __await__(self) -> Generator[Any, None, Completion]: ...

class Model:
    config: Dict[str, Any]
    arch: str
    backend: str
    compute: str
    is_diffusion: bool
    path: str
    tokenizer: Optional[Tokenizer]
    def __init__(self, path: str, backend: str = ..., threads: int = ..., weights: str = ...,
                 plugin_dir: Optional[str] = ..., compute: str = ...) -> None: ...
    def hook_points(self) -> List[HookPoint]: ...
    def apply_chat_template(self, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = ...) -> str: ...
    def hooks(self, fns: Mapping[str, HookFn], positions: Union[str, Sequence[int]] = ...,
              steps: str = ...) -> ContextManager[Model]: ...
    def edits(self, edits: Sequence[Mapping[str, Any]]) -> ContextManager[Model]: ...
    def run_with_cache(self, inputs: Union[Prompt, Sequence[Prompt]], hooks: Optional[str] = ...,
                       positions: Union[str, Sequence[int]] = ...,
                       storage: str = ...) -> Tuple[Union[npt.NDArray[np.float32], List[npt.NDArray[np.float32]]], Cache]: ...
    def generate(self, prompts: Union[Prompt, Sequence[Prompt]], max_new_tokens: Optional[int] = ...,
                 temperature: Optional[float] = ..., top_p: Optional[float] = ..., top_k: Optional[int] = ...,
                 repetition_penalty: Optional[float] = ..., stop: Optional[Union[str, Sequence[str]]] = ...,
                 steps: Optional[int] = ..., alg: Optional[str] = ..., eps: Optional[float] = ...,
                 alg_temp: Optional[float] = ..., seed: int = ..., hooks: Optional[str] = ..., positions: str = ...,
                 capture: str = ..., storage: str = ..., batch_size: int = ..., history: bool = ...,
                 diffusion_mode: Optional[str] = ..., block_size: Optional[int] = ..., threshold: Optional[float] = ...,
                 tokens_per_step: Optional[int] = ..., refresh_every: Optional[int] = ...) -> Generation: ...
    def generate_stream(self, prompts: Union[Prompt, Sequence[Prompt]], **kwargs: Any) -> Iterator[Union[Token, Step, Finished]]: ...
    def engine(self, slots: int = ..., max_waiting: int = ..., max_context: int = ..., prefill_chunk: int = ...) -> None: ...
    def engine_stats(self) -> Dict[str, int]: ...
    def submit(self, prompt: Optional[Prompt] = ..., *, ids: Optional[Ids] = ...,
               messages: Optional[Sequence[Mapping[str, str]]] = ..., id: Optional[str] = ...,
               max_new_tokens: Optional[int] = ..., temperature: Optional[float] = ..., top_p: Optional[float] = ...,
               top_k: Optional[int] = ..., repetition_penalty: Optional[float] = ...,
               stop: Optional[Union[str, Sequence[str]]] = ..., steps: Optional[int] = ..., alg: Optional[str] = ...,
               eps: Optional[float] = ..., alg_temp: Optional[float] = ..., seed: int = ...,
               edits: Optional[Sequence[Mapping[str, Any]]] = ..., hooks: Optional[str] = ...,
               **settings: Any) -> Handle: ...

class Dump:
    path: str
    attrs: Dict[str, Any]
    complete: bool
    hooks: Dict[str, Tuple[int, ...]]
    def __len__(self) -> int: ...
    def __enter__(self) -> Dump: ...
    def __exit__(self, *exc: Any) -> None: ...
    def close(self) -> None: ...
    def prompt(self, i: int) -> Dict[str, Any]: ...
    def acts(self, hook: str, prompt: Optional[int] = ...) -> np.ndarray: ...
    def rows(self, prompt: Optional[int] = ...) -> Dict[str, np.ndarray]: ...
    def steps(self, prompt: int) -> List[Dict[str, Any]]: ...
    @property
    def logits(self) -> Optional[npt.NDArray[np.float32]]: ...
    @property
    def input_ids(self) -> Optional[npt.NDArray[np.int32]]: ...

def open_dump(path: str) -> Dump: ...
def report(dump: str, out: str, *, stats: Union[str, List[str]] = ..., lens: Union[str, List[str]] = ...,
           prompts: Union[str, List[str]] = ..., model: Optional[str] = ..., overwrite: bool = ...,
           max_prompts: int = ..., max_positions: int = ..., max_steps: int = ...) -> Dict[str, Any]: ...
def batch(model: Union[Model, str], input: str, output: str, acts: Optional[str] = ..., hooks: Optional[str] = ...,
          positions: str = ..., capture: str = ..., storage: str = ..., compress: bool = ..., batch_size: int = ...,
          checkpoint_every: int = ..., checkpoint_seconds: float = ..., resume: bool = ..., overwrite: bool = ...,
          durable: bool = ..., skip_bad_lines: bool = ..., seed: int = ..., progress: bool = ...,
          **defaults: Any) -> Dict[str, Any]: ...
def bf16_to_f32(bits: npt.ArrayLike) -> npt.NDArray[np.float32]: ...
