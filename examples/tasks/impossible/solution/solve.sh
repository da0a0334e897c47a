#!/bin/bash
echo "I could not find one." > /app/proof.txt
