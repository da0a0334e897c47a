#!/bin/bash
# Partial credit: one reward key per answer, written as reward.json.
words=0; lines=0
[ "$(cat /app/count.txt 2>/dev/null)" = "20" ] && words=1
[ "$(cat /app/lines.txt 2>/dev/null)" = "4" ] && lines=1
printf '{"words": %s, "lines": %s}\n' "$words" "$lines" > /logs/verifier/reward.json
