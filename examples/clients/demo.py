#!/usr/bin/env python3
"""`cargo xtask demo --serve`'s two Python programs in one file, standard library only:
a supervisor that delivers completions and a loop that consumes them, both talking to
`notify serve` over signed HTTP. xtask runs `demo.py before` against a server, kills
the server, restarts it on the same journal, then runs `demo.py after`.

Environment: NOTIFY_URL, NOTIFY_SECRET (whsec_...), DEMO_STATE (a JSON file the two
phases share).
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
STATE = os.environ["DEMO_STATE"]


def call(method, path, msg_id, body=b""):
    ts = str(int(time.time()))
    mac = hmac.new(KEY, f"{msg_id}.{ts}.".encode() + body, hashlib.sha256).digest()
    req = urllib.request.Request(URL + path, data=body, method=method, headers={
        "content-type": "application/json", "webhook-id": msg_id, "webhook-timestamp": ts,
        "webhook-signature": "v1," + base64.b64encode(mac).decode()})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null")


def say(who, text):
    print(f"  [{who}] {text}", flush=True)


def check(cond, what):
    if not cond:
        sys.exit(f"demo: unexpected: {what}")


def completion(session, loop, command, handle):
    return json.dumps({"command_id": command, "session_id": session, "loop_id": loop,
                       "process_handle": handle, "state": 3, "reason": 1},
                      separators=(",", ":")).encode()


def deliver(session, command, body):
    return call("POST", f"/v1/sessions/{session}/completions", command, body)


def before():
    session, loop = str(uuid.uuid4()), str(uuid.uuid4())
    check(call("PUT", f"/v1/sessions/{session}", f"open:{session}")[0] == 201, "open")
    check(call("PUT", f"/v1/sessions/{session}/loops/{loop}", f"register:{session}:{loop}",
               b'{"capacity":64}')[0] == 201, "register")
    say("loop", f"registered loop {loop[:8]}… in session {session[:8]}…")
    commands = [str(uuid.uuid4()) for _ in range(3)]
    for i, command in enumerate(commands):
        status, body = deliver(session, command, completion(session, loop, command, f"build-{i}"))
        check(status == 201, f"accepted: {status} {body}")
        say("supervisor", f"process build-{i} exited: POST {command[:8]}… -> {status} {body['disposition']}")
    status, body = deliver(session, commands[0], completion(session, loop, commands[0], "build-0"))
    check(status == 200, "duplicate")
    say("supervisor", f"its answer was lost, so it retries build-0 with the same ID -> {status} "
        f"{body['disposition']} (original seq {body['seq']}): harmless")
    status, body = deliver(session, commands[0], completion(session, loop, commands[0], "build-9"))
    check(status == 409, "collision")
    say("supervisor", f"a bug reuses that ID for another process -> {status} {body['disposition']}: "
        f"fails closed (stored payload's sha256 {body['stored_sha256'][:12]}…, never the payload)")
    status, body = call("GET", f"/v1/sessions/{session}/loops/{loop}/notifications?wait_ms=2000", f"poll:{loop}")
    got = [n["command_id"] for n in body["notifications"]]
    check(got == commands, f"in order: {got}")
    say("loop", f"long poll -> {len(got)} notifications, in order")
    check(call("POST", f"/v1/sessions/{session}/loops/{loop}/notifications/{got[0]}/ack", f"ack:{got[0]}")[0] == 200,
          "ack")
    say("loop", f"acts on build-0 and acknowledges it; build-1 and build-2 are handed out, not yet acknowledged")
    json.dump({"session": session, "loop": loop, "commands": commands}, open(STATE, "w"))


def after():
    state = json.load(open(STATE))
    session, loop, commands = state["session"], state["loop"], state["commands"]
    status, body = call("PUT", f"/v1/sessions/{session}/loops/{loop}", f"register:{session}:{loop}",
                        b'{"capacity":64}')
    check(status == 201 and body["seeded"] == 2, f"seeded: {status} {body}")
    say("loop", f"re-registers its loop on the restarted server -> {status}, seeded with {body['seeded']} "
        "unacknowledged notifications from the journal")
    status, body = call("GET", f"/v1/sessions/{session}/loops/{loop}/notifications?wait_ms=2000", f"poll:{loop}")
    got = [n["command_id"] for n in body["notifications"]]
    check(got == commands[1:], f"handed out again: {got}")
    say("loop", "long poll -> build-1 and build-2 handed out again (build-0 was acknowledged: never again)")
    for command in got:
        check(call("POST", f"/v1/sessions/{session}/loops/{loop}/notifications/{command}/ack",
                   f"ack:{command}")[0] == 200, "ack")
    say("loop", "acts on them and acknowledges both")
    status, body = deliver(session, commands[2], completion(session, loop, commands[2], "build-2"))
    check(status == 200, "duplicate after restart")
    say("supervisor", f"retries build-2 after the restart -> {status} {body['disposition']}: the journal remembers")
    status, body = call("POST", f"/v1/sessions/{session}/end", f"end:{session}", b'{"if_pending":"refuse"}')
    check(status == 200, f"end: {body}")
    say("supervisor", f"ends the session -> {status} {body['outcome']}: nothing was pending")


{"before": before, "after": after}[sys.argv[1]]()
