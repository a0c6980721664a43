#!/usr/bin/env python3
"""A supervisor and a loop talking to `notify serve`, with the standard library only
(urllib, hmac). Usage: NOTIFY_URL=http://127.0.0.1:8080 NOTIFY_SECRET=whsec_... python3 python_client.py

Prints one line per step and exits non-zero if an answer is not the expected one.
"""
import base64
import hashlib
import hmac
import json
import os
import sys
import time
import urllib.error
import urllib.request
import uuid

URL = os.environ["NOTIFY_URL"].rstrip("/")
KEY = base64.b64decode(os.environ["NOTIFY_SECRET"].removeprefix("whsec_"))


def call(method, path, msg_id, body=b""):
    """A signed request (Standard Webhooks); returns (status, JSON answer)."""
    ts = str(int(time.time()))
    mac = hmac.new(KEY, f"{msg_id}.{ts}.".encode() + body, hashlib.sha256).digest()
    req = urllib.request.Request(URL + path, data=body, method=method, headers={
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": ts,
        "webhook-signature": "v1," + base64.b64encode(mac).decode(),
    })
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as err:  # 4xx/5xx: the body still names the disposition
        return err.code, json.loads(err.read() or b"null")


def expect(what, got, status, **fields):
    code, body = got
    ok = code == status and all(body.get(k) == v for k, v in fields.items())
    print(f"{'ok ' if ok else 'BAD'} {what}: {code} {body.get('disposition') or body.get('outcome')}")
    if not ok:
        sys.exit(f"unexpected answer to {what}: {code} {body}")
    return body


session, loop, command = str(uuid.uuid4()), str(uuid.uuid4()), str(uuid.uuid4())
expect("open the session", call("PUT", f"/v1/sessions/{session}", f"open:{session}"), 201)
expect("register the loop", call("PUT", f"/v1/sessions/{session}/loops/{loop}", f"register:{session}:{loop}",
                                 b'{"capacity":64}'), 201)

# The supervisor: the DTO's wire form, its command ID chosen before the first attempt.
notification = {"command_id": command, "session_id": session, "loop_id": loop,
                "process_handle": "build-42", "state": 3, "reason": 1}
body = json.dumps(notification, separators=(",", ":")).encode()
completions = f"/v1/sessions/{session}/completions"
expect("deliver", call("POST", completions, command, body), 201, disposition="accepted")
expect("retry", call("POST", completions, command, body), 200, disposition="duplicate", seq=1)
other = json.dumps(dict(notification, process_handle="build-43")).encode()
answer = expect("same ID, other body", call("POST", completions, command, other), 409,
                disposition="collision")
assert answer["stored_sha256"] == hashlib.sha256(body).hexdigest(), "digest of what was stored"

# The loop: long poll, act, acknowledge.
polled = expect("poll", call("GET", f"/v1/sessions/{session}/loops/{loop}/notifications?wait_ms=2000",
                             f"poll:{loop}"), 200)
assert [n["command_id"] for n in polled["notifications"]] == [command], polled
assert polled["notifications"][0]["notification"] == notification
expect("acknowledge", call("POST", f"/v1/sessions/{session}/loops/{loop}/notifications/{command}/ack",
                           f"ack:{command}"), 200, outcome="acknowledged")
expect("end the session", call("POST", f"/v1/sessions/{session}/end", f"end:{session}",
                               b'{"if_pending":"refuse"}'), 200, outcome="ended")
print("python client: all answers as expected")
