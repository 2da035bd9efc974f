"""Completions from a run's Hugging Face export with transformers: OpenAI's /v1/completions and, when the
tokenizer has a chat template, /v1/chat/completions. One request generates at a time per replica (more
replicas serve more at once); the GPU path for throughput is vllm_app.py."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import torch
from pydantic import BaseModel, ConfigDict, Field

from rayfleet.serve.http import RequestError


class Sampling(BaseModel):
    model_config = ConfigDict(extra="ignore")  # OpenAI clients send fields we do not use (user, logprobs=None)

    model: str | None = None
    max_tokens: int = Field(16, ge=1)
    temperature: float = Field(1.0, ge=0, le=2, description="0: greedy")
    top_p: float = Field(1.0, gt=0, le=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int = 1
    stream: bool = False
    return_token_ids: bool = Field(False, description="also return the generated token ids (as vLLM does)")


class CompletionRequest(Sampling):
    prompt: str = Field(min_length=1)


class ChatMessage(BaseModel):
    role: str
    content: str


class ChatRequest(Sampling):
    messages: list[ChatMessage] = Field(min_length=1)


class TextGenerator:
    def __init__(self, folder: Path, model_id: str, max_tokens_limit: int):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model_id, self.max_tokens_limit = model_id, max_tokens_limit
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        dtype = torch.bfloat16 if self.device.type == "cuda" else torch.float32
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(self.device).eval()
        self.context = int(getattr(self.model.config, "max_position_embeddings", 2048))
        self.has_chat_template = bool(getattr(self.tokenizer, "chat_template", None))
        self.lock = threading.Lock()

    def complete(self, req: CompletionRequest) -> dict:
        ids = self.tokenizer(req.prompt, add_special_tokens=False)["input_ids"]
        choice, usage = self._generate(ids, req)
        return self._response("text_completion", "cmpl", {"text": choice.pop("text"), **choice}, usage)

    def chat(self, req: ChatRequest) -> dict:
        if not self.has_chat_template:
            raise RequestError(
                404, "this model's tokenizer has no chat template: use /v1/completions", "no_chat_template"
            )
        messages = [m.model_dump() for m in req.messages]
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        choice, usage = self._generate(ids, req)
        message = {"role": "assistant", "content": choice.pop("text")}
        return self._response("chat.completion", "chatcmpl", {"message": message, **choice}, usage)

    def _check(self, prompt_tokens: int, req: Sampling) -> None:
        if req.model not in (None, self.model_id):
            raise RequestError(
                404,
                f"model {req.model!r} is not served here; this endpoint serves {self.model_id!r}",
                "model_not_found",
            )
        if req.stream:
            raise RequestError(
                400, "stream: not supported by the transformers engine (engine: vllm streams)", "unsupported"
            )
        if req.n != 1:
            raise RequestError(400, "n: only 1 completion per request", "unsupported")
        if req.max_tokens > self.max_tokens_limit:
            raise RequestError(400, f"max_tokens: at most {self.max_tokens_limit} here, got {req.max_tokens}")
        if prompt_tokens + req.max_tokens > self.context:
            raise RequestError(
                400,
                f"this model's maximum context length is {self.context} tokens; the prompt has {prompt_tokens} "
                f"and max_tokens asks for {req.max_tokens} more",
                "context_length_exceeded",
            )

    @torch.no_grad()
    def _generate(self, ids: list[int], req: Sampling) -> tuple[dict, dict]:
        self._check(len(ids), req)
        sampling = {"do_sample": False}
        if req.temperature > 0:
            sampling = {"do_sample": True, "temperature": req.temperature, "top_p": req.top_p}
        input_ids = torch.tensor([ids], device=self.device)
        eos = self.tokenizer.eos_token_id
        with self.lock:
            if req.seed is not None:
                torch.manual_seed(req.seed)
            out = self.model.generate(
                input_ids=input_ids,
                attention_mask=torch.ones_like(input_ids),
                max_new_tokens=req.max_tokens,
                pad_token_id=eos if eos is not None else 0,
                **sampling,
            )
        new = out[0, len(ids) :].tolist()
        finish = "length"
        if eos is not None and eos in new:
            new, finish = new[: new.index(eos)], "stop"
        text = self.tokenizer.decode(new, skip_special_tokens=True)
        for stop in [req.stop] if isinstance(req.stop, str) else req.stop or []:
            if stop and stop in text:
                text, finish = text[: text.index(stop)], "stop"
        choice = {"index": 0, "text": text, "finish_reason": finish}
        if req.return_token_ids:
            choice["token_ids"] = new
        return choice, {"prompt_tokens": len(ids), "completion_tokens": len(new), "total_tokens": len(ids) + len(new)}

    def _response(self, kind: str, prefix: str, choice: dict, usage: dict) -> dict:
        return {
            "id": f"{prefix}-{uuid.uuid4().hex}",
            "object": kind,
            "created": int(time.time()),
            "model": self.model_id,
            "choices": [choice],
            "usage": usage,
        }

    def models(self) -> dict:
        return {"object": "list", "data": [{"id": self.model_id, "object": "model", "owned_by": "rayfleet"}]}
