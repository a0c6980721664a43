#!/usr/bin/env bash
# Deliver and consume one completion with curl; the Standard Webhooks signature is
# computed in a shell line with openssl. Needs curl, openssl and a `notify serve`
# whose keys include $NOTIFY_SECRET:
#
#   NOTIFY_SERVE_KEYS=$NOTIFY_SECRET notify serve --journal notify.redb --listen 127.0.0.1:8080
#   NOTIFY_URL=http://127.0.0.1:8080 NOTIFY_SECRET=whsec_... ./curl.sh
set -euo pipefail
: "${NOTIFY_URL:?the server, e.g. http://127.0.0.1:8080}" "${NOTIFY_SECRET:?a whsec_ key the server has}"
uuid() { python3 -c 'import uuid; print(uuid.uuid4())' 2>/dev/null || cat /proc/sys/kernel/random/uuid; }
S=$(uuid) L=$(uuid) C=$(uuid)
KEY=$(printf '%s' "${NOTIFY_SECRET#whsec_}" | openssl base64 -d -A | od -An -tx1 | tr -d ' \n')

# sign ID BODY: the three headers of a signed request (signed content: id.timestamp.body).
sign() {
  local ts sig
  ts=$(date +%s)
  sig=$(printf '%s.%s.%s' "$1" "$ts" "$2" | openssl dgst -sha256 -mac HMAC -macopt "hexkey:$KEY" -binary | openssl base64 -A)
  printf -- '-H\nwebhook-id: %s\n-H\nwebhook-timestamp: %s\n-H\nwebhook-signature: v1,%s\n' "$1" "$ts" "$sig"
}
# call METHOD PATH ID BODY: prints the status line's code and the JSON answer.
call() {
  local args=()
  mapfile -t args < <(sign "$3" "$4")
  curl -sS -X "$1" "$NOTIFY_URL$2" "${args[@]}" -H 'content-type: application/json' \
    --data-binary "$4" -w ' %{http_code}\n'
}

call PUT "/v1/sessions/$S" "open:$S" ''                          # open the session: 201
call PUT "/v1/sessions/$S/loops/$L" "register:$S:$L" '{"capacity":64}'     # register a loop: 201
BODY='{"command_id":"'$C'","session_id":"'$S'","loop_id":"'$L'","process_handle":"build-42","state":3,"reason":1}'
call POST "/v1/sessions/$S/completions" "$C" "$BODY"             # accepted: 201
call POST "/v1/sessions/$S/completions" "$C" "$BODY"             # a retry: duplicate, 200
call POST "/v1/sessions/$S/completions" "$C" "${BODY/build-42/build-43}"   # same ID, other body: 409
call GET "/v1/sessions/$S/loops/$L/notifications?wait_ms=1000" "poll:$L" ''   # the loop's side
call POST "/v1/sessions/$S/loops/$L/notifications/$C/ack" "ack:$C" ''       # acknowledged
call POST "/v1/sessions/$S/end" "end:$S" '{"if_pending":"refuse"}'          # ended
