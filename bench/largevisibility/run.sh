#!/usr/bin/env bash
# SQL-level comparison of the two visibility designs for one large (chunked)
# job (issue 32; docs/architecture.md "Large jobs", docs/performance.md
# "Large jobs: visibility design"). Each run re-creates the database, migrates
# it (etlctl migrate up), adds a base of 100,000 visible rows, then loads
# 1,000,000 transformed rows of one job as the chosen design would:
#
#   view     chunks of 10,000 rows COPY'd into processed_data, each chunk in one
#            transaction with the fenced statement and the checkpoint UPDATE;
#            success = the fenced terminal UPDATE + load_state VISIBLE + queue
#            DELETE + outbox row, one transaction; readers use processed_data_visible.
#   staging  the same chunk transactions into a staging table; success = the
#            same terminal writes + INSERT INTO processed_data SELECT ... +
#            DELETE FROM the staging table, one transaction.
#   copy     the physical limit: one COPY of the same 1,000,000 rows into
#            processed_data.
#
#   staging-truncate  the same with TRUNCATE of the staging table instead of the
#            DELETE (a staging table per job: ACCESS EXCLUSIVE on it, no dead rows).
#
# usage: run.sh ROWS_DIR view|staging|staging-truncate|copy [DATABASE_URL_BASE]
#   ROWS_DIR holds chunk_0001.tsv .. chunk_0100.tsv and all.tsv (gen.sh ROWS_DIR).
#   DATABASE_URL_BASE defaults to postgres://postgres@127.0.0.1:5472 (database large32).
# Prints one line "figure name value" per measurement.
set -euo pipefail
rows=$1 design=$2 base=${3:-postgres://postgres@127.0.0.1:5472}
db=$base/large32
etlctl=${ETLCTL:-etlctl}
job=3a7c0000-0000-4000-8000-000000000032
claim=3a7c0000-0000-4000-8000-0000000c1a1a
owner=bench-large-worker-1
small=3a7c0000-0000-4000-8000-00000000000a

psql -q "$base/postgres" -c "DROP DATABASE IF EXISTS large32 WITH (FORCE)"
"$etlctl" migrate up -database-url "$db" >/dev/null 2>&1
q() { psql -X -q -v ON_ERROR_STOP=1 -At "$db" "$@"; }

# The job row (RUNNING under one exact lease), its upload, load and queue rows;
# a base of 100 small jobs of 1,000 visible rows each (one of them $small).
q <<SQL
INSERT INTO etl_job_records (job_record_id, job_kind, principal_scope_hash, submission_key_hash,
    request_digest, request_payload, job_status, attempt_count, max_attempts,
    lease_claim_id, lease_owner_id, lease_expires_at, lease_fencing_token)
VALUES ('$job', 'etl_chunked', sha256('owner'), sha256('key'), sha256('payload'),
    '{"uploadId":"$job","format":"jsonl","bytes":112000000,"parts":18,"maxBadRecords":0}',
    'RUNNING', 1, 5, '$claim', '$owner', clock_timestamp() + interval '1 hour', 1);
INSERT INTO etl_uploads (upload_id, principal_scope_hash, upload_format, upload_state, staged_bytes, job_record_id, expires_at)
VALUES ('$job', sha256('owner'), 'jsonl', 'SUBMITTED', 112000000, '$job', clock_timestamp() + interval '1 day');
INSERT INTO etl_chunked_loads (job_record_id, upload_id, load_format, payload_bytes)
VALUES ('$job', '$job', 'jsonl', 112000000);
INSERT INTO etl_chunked_job_queue (job_record_id) VALUES ('$job');
INSERT INTO processed_data (job_record_id, data, normalized_record)
SELECT CASE WHEN j = 0 THEN '$small'::uuid ELSE md5('small' || j)::uuid END,
       'ID:b' || i || ',NAME:JOHN,AMOUNT:1.00,', jsonb_build_object('ID', 'b' || i, 'NAME', 'JOHN', 'AMOUNT', '1.00')
FROM generate_series(0, 99) j, generate_series(1, 1000) i;
CREATE TABLE etl_chunked_staged_rows (
    job_record_id uuid NOT NULL,
    data text NOT NULL,
    normalized_record jsonb NOT NULL
);
CREATE INDEX etl_chunked_staged_rows_job_index ON etl_chunked_staged_rows (job_record_id);
VACUUM ANALYZE;
CHECKPOINT;
SQL

phase() { # $1 = name; runs stdin in one session: seconds (database clock), WAL bytes, checkpoints
    { cat <<SQL
SELECT clock_timestamp() AS t0, pg_current_wal_lsn() AS l0,
    (SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter) AS c0 \gset
\o /dev/null
SQL
      cat
      cat <<SQL
\o
SELECT '$1_s', round(extract(epoch FROM clock_timestamp() - :'t0')::numeric, 3);
SELECT '$1_wal_bytes', pg_wal_lsn_diff(pg_current_wal_lsn(), :'l0');
SELECT '$1_checkpoints', (SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter) - :c0;
SQL
    } | q -F ' ' -f - | tee -a "$out"
}
out=$(mktemp)
fence="SELECT 1 FROM etl_job_records WHERE job_record_id = '$job' AND job_status = 'RUNNING'
    AND lease_claim_id = '$claim' AND lease_owner_id = '$owner' AND lease_expires_at > clock_timestamp() FOR NO KEY UPDATE;"
terminal="UPDATE etl_job_records SET job_status = 'SUCCEEDED', request_payload = NULL, lease_claim_id = NULL,
    lease_owner_id = NULL, lease_expires_at = NULL, lease_fencing_token = NULL, updated_at = clock_timestamp()
    WHERE job_record_id = '$job' AND job_status = 'RUNNING' AND lease_claim_id = '$claim'
    AND lease_owner_id = '$owner' AND lease_expires_at > clock_timestamp();
UPDATE etl_chunked_loads SET load_state = 'VISIBLE', updated_at = clock_timestamp() WHERE job_record_id = '$job';
DELETE FROM etl_chunked_job_queue WHERE job_record_id = '$job';
INSERT INTO etl_outbox_events (event_kind, job_record_id, job_status, attempt_count) VALUES ('job_lifecycle', '$job', 'SUCCEEDED', 1);"

chunks() { # $1 = target table: 100 chunk transactions of 10,000 rows
    local n
    for n in $(seq 1 100); do
        cat <<SQL
BEGIN;
$fence
\copy $1 (job_record_id, data, normalized_record) FROM '$rows/chunk_$(printf %04d "$n").tsv'
UPDATE etl_chunked_loads SET chunks_done = chunks_done + 1, records_loaded = records_loaded + 10000,
    next_part_offset = next_part_offset + 1120000, next_record_number = next_record_number + 10000,
    checkpoint_at = clock_timestamp(), updated_at = clock_timestamp() WHERE job_record_id = '$job';
COMMIT;
SQL
    done
}

readers() { # $1 = label; five runs each, the median's Execution Time
    local rel what sql t
    for rel in processed_data processed_data_visible; do
        for what in count big small; do
            case $what in
            count) sql="SELECT count(*) FROM $rel" ;;
            big) sql="SELECT count(*) FROM $rel WHERE job_record_id = '$job'" ;;
            small) sql="SELECT count(*) FROM $rel WHERE job_record_id = '$small'" ;;
            esac
            q -c "$sql" >/dev/null # warm
            t=$(for i in 1 2 3 4 5; do q -c "EXPLAIN (ANALYZE, TIMING OFF) $sql" | sed -n 's/^Execution Time: \([0-9.]*\) ms/\1/p'; done | sort -n | sed -n 3p)
            echo "reader_${1}_${rel}_${what}_ms $t"
        done
    done
}

case $design in
view)
    chunks processed_data | phase load
    readers loading
    phase success <<<"BEGIN; $terminal COMMIT;"
    ;;
staging | staging-truncate)
    chunks etl_chunked_staged_rows | phase load
    clear="DELETE FROM etl_chunked_staged_rows WHERE job_record_id = '$job';"
    [ "$design" = staging ] || clear="TRUNCATE etl_chunked_staged_rows;"
    phase success <<SQL
BEGIN; $terminal
INSERT INTO processed_data (job_record_id, data, normalized_record)
SELECT job_record_id, data, normalized_record FROM etl_chunked_staged_rows WHERE job_record_id = '$job';
$clear
COMMIT;
SQL
    ;;
copy)
    phase load <<<"\copy processed_data (job_record_id, data, normalized_record) FROM '$rows/all.tsv'"
    phase success <<<"SELECT 1;"
    ;;
esac
awk '$1 ~ /^(load|success)_(s|wal_bytes)$/ { sub(/^(load|success)_/, "", $1); t[$1] += $2 }
    END { printf "total_s %.3f\ntotal_wal_bytes %d\n", t["s"], t["wal_bytes"] }' "$out"
phase vacuum <<<"VACUUM;"
readers visible
q -F ' ' -c "SELECT 'visible_rows_of_job', count(*) FROM processed_data_visible WHERE job_record_id = '$job'"
q -F ' ' -c "SELECT 'processed_data_bytes', pg_total_relation_size('processed_data')"
rm -f "$out"
