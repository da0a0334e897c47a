#!/bin/bash
# No agent can pass: the reward is always 0.
echo "proof rejected: $(cat /app/proof.txt 2>&1)"
echo 0 > /logs/verifier/reward.txt
