"""Tell people about a run: start, success, failure (with the output's tail), a resume after a failure or
preemption, and a stall. Two channels, each optional: the deployment's SNS topic (KMS-encrypted; e-mail
subscriptions from Terraform; RAYFLEET_NOTIFY_TOPIC_ARN) and a Slack-compatible webhook (a recipe's
`notify.webhook`, a secret reference, RAYFLEET_NOTIFY_WEBHOOK in the job's process only). A channel that
fails costs a warning line, never the run."""

from __future__ import annotations

import json
import os
import sys
import urllib.parse
import urllib.request
from dataclasses import dataclass

from rayfleet.core.aws import shared_client

TOPIC_VAR, WEBHOOK_VAR = "RAYFLEET_NOTIFY_TOPIC_ARN", "RAYFLEET_NOTIFY_WEBHOOK"
NOTIFY_VAR = "RAYFLEET_NOTIFY"  # {"run", "stall_after_s"}: set by the submitter when the run notifies
SUBJECT_LIMIT = 100  # SNS's


@dataclass(frozen=True)
class Event:
    run: str
    kind: str  # started | succeeded | failed | resumed | stalled | hung
    detail: str = ""

    @property
    def subject(self) -> str:
        return f"rayfleet: run {self.run} {self.kind}"[:SUBJECT_LIMIT]

    @property
    def text(self) -> str:
        return self.subject + (f"\n{self.detail}" if self.detail else "")


class Notifier:
    def __init__(self, topic_arn: str | None, webhook: str | None, region: str | None = None):
        self.topic_arn, self.webhook, self.region = topic_arn, webhook, region

    @classmethod
    def from_environment(cls) -> Notifier:
        return cls(os.environ.get(TOPIC_VAR) or None, os.environ.get(WEBHOOK_VAR) or None)

    @property
    def enabled(self) -> bool:
        return bool(self.topic_arn or self.webhook)

    def send(self, event: Event) -> None:
        if self.topic_arn:
            self._try("SNS", lambda: self._sns(event))
        if self.webhook:
            self._try("the webhook", lambda: self._post(event))

    def _sns(self, event: Event) -> None:
        region = self.region or self.topic_arn.split(":")[3]  # arn:aws:sns:<region>:<account>:<name>
        shared_client("sns", region).publish(TopicArn=self.topic_arn, Subject=event.subject, Message=event.text)

    def _post(self, event: Event) -> None:
        if urllib.parse.urlsplit(self.webhook).scheme not in ("https", "http"):  # urllib also opens file:, ftp:
            raise ValueError("the webhook URL is not http(s)")  # the URL itself is a secret: never printed
        body = json.dumps({"text": event.text}).encode()  # Slack's incoming-webhook shape (Mattermost, Teams too)
        request = urllib.request.Request(self.webhook, body, {"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()

    @staticmethod
    def _try(channel: str, send) -> None:
        try:
            send()
        except Exception as exc:  # boto's, urllib's and socket errors alike: a notification never fails a run
            print(f"warning: could not notify through {channel}: {exc}", file=sys.stderr, flush=True)
