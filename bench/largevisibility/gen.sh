#!/usr/bin/env bash
# Writes the 1,000,000 transformed rows of one job (run.sh's job id) in COPY text
# format: ROWS_DIR/all.tsv and the same rows as chunk_0001.tsv .. chunk_0100.tsv
# (10,000 each). Record i is {"id":"r<i, 9 digits>","name":"jane doe",
# "email":"Jane.Doe@Example.com","amount":"<i mod 100000>.<i mod 10>","city":"springfield"}
# (about 112 bytes of JSON Lines), transformed as internal/etl does.
set -euo pipefail
mkdir -p "$1"
cd "$1"
awk -v job=3a7c0000-0000-4000-8000-000000000032 'BEGIN {
    for (i = 1; i <= 1000000; i++) {
        id = sprintf("r%09d", i); a = sprintf("%d.%d0", i % 100000, i % 10)
        line = sprintf("%s\tID:%s,NAME:JANE DOE,EMAIL:jane.doe@example.com,AMOUNT:%s,CITY:springfield,\t{\"ID\":\"%s\",\"NAME\":\"JANE DOE\",\"EMAIL\":\"jane.doe@example.com\",\"AMOUNT\":\"%s\",\"CITY\":\"springfield\"}", job, id, a, id, a)
        print line > "all.tsv"
        f = sprintf("chunk_%04d.tsv", int((i - 1) / 10000) + 1)
        print line > f
        if (i % 10000 == 0) close(f)
    }
}'
