#!/bin/bash
wc -w < /app/poem.txt | tr -d ' ' > /app/count.txt
wc -l < /app/poem.txt | tr -d ' ' > /app/lines.txt
