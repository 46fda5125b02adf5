"""foldgate as LiteLLM's context engine: a custom callback that, before
each chat call, posts the conversation to foldgate's
`POST /foldgate/v1/compress` and sends the model the view foldgate
answers (pinned system prompt + one summary of the older messages + the
recent ones verbatim) instead of the whole history.

LiteLLM proxy, config.yaml (this file beside it, as `litellm_compress.py`):

    litellm_settings:
      callbacks: litellm_compress.proxy_handler_instance

Environment:

    FOLDGATE_URL      foldgate's address (default http://127.0.0.1:8080)
    FOLDGATE_API_KEY  a key of foldgate's `server.api_keys`, when set; it
                      is then the one tenant all of LiteLLM's conversations
                      are kept under. Unset: each LiteLLM virtual key is
                      its own tenant (its hash is sent as the credential).
    FOLDGATE_TIMEOUT  seconds to wait for foldgate (default 120: a new
                      fold waits for foldgate's summarizer call)

foldgate needs a provider for the models LiteLLM serves, for its
summarizer calls, with `api_key_env` set (the credential this callback
sends names a tenant; it is no key of the model's provider). See
docs/embedding.md. Any failure (foldgate down, an error answer) leaves the
request as it was: compression is an optimisation, never a new way for a
call to fail.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import httpx
from litellm.integrations.custom_logger import CustomLogger

log = logging.getLogger("foldgate")

CHAT_CALLS = ("completion", "acompletion")


class FoldgateCompress(CustomLogger):
    """Replaces a chat call's messages with foldgate's view of them."""

    def __init__(self, url: str | None = None, timeout: float | None = None):
        super().__init__()
        self.url = (url or os.environ.get("FOLDGATE_URL", "http://127.0.0.1:8080")).rstrip("/")
        self.timeout = timeout or float(os.environ.get("FOLDGATE_TIMEOUT", "120"))

    async def async_pre_call_hook(self, user_api_key_dict: Any, cache: Any, data: dict, call_type: str):
        if call_type not in CHAT_CALLS or not data.get("messages") or not data.get("model"):
            return data
        body = {"messages": data["messages"], "model": data["model"]}
        if data.get("tools"):
            body["tools"] = data["tools"]
        conversation = conversation_of(data)
        if conversation:
            body["conversation"] = conversation
        headers = {}
        credential = os.environ.get("FOLDGATE_API_KEY") or getattr(user_api_key_dict, "token", None)
        if credential:
            headers["authorization"] = f"Bearer {credential}"
        try:
            async with httpx.AsyncClient(timeout=self.timeout) as client:
                reply = await client.post(f"{self.url}/foldgate/v1/compress", json=body, headers=headers)
            if reply.status_code != 200:
                log.warning("foldgate answered %s: %s", reply.status_code, reply.text[:300])
                return data
            answer = reply.json()
        except (httpx.HTTPError, ValueError) as e:
            log.warning("foldgate unreachable, sending the messages as they are: %s", e)
            return data
        if answer.get("warning"):
            log.warning("foldgate: %s", answer["warning"])
        data["messages"] = answer["messages"]
        # What foldgate did, for LiteLLM's logs and spend tracking.
        metadata = data.setdefault("metadata", {})
        metadata["foldgate"] = {
            key: answer.get(key) for key in ("fold", "tokens_saved", "conversation", "compressed")
        }
        return data


def conversation_of(data: dict) -> str | None:
    """The conversation's id as LiteLLM knows it: its session id, else
    `metadata.conversation_id`; None lets foldgate fingerprint it."""
    session = data.get("litellm_session_id")
    if session:
        return str(session)
    metadata = data.get("metadata") or {}
    found = metadata.get("conversation_id") or metadata.get("session_id")
    return str(found) if found else None


proxy_handler_instance = FoldgateCompress()
