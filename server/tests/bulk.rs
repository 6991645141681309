//! The two forms of a set-based insert (`gpuledger_server::bulk`): `unnest` on PostgreSQL and multi-row `VALUES` as a
//! distributed Citus database gets them store the same rows, with the same conflicts and the same `RETURNING`. Both
//! run here on plain PostgreSQL (the `VALUES` form is plain SQL; the Citus check runs it on a real cluster).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use gpuledger_server::bulk::{Insert, col, constant, text_arrays};
use sqlx::Row;

#[tokio::test]
async fn unnest_and_values_forms_store_the_same_rows() {
    let (test_db, _db) = common::migrated().await;
    let pool = common::admin_pool(&test_db).await;
    sqlx::query(
        "CREATE TABLE bulk_probe (org uuid, k bigint, name text, note text, at timestamptz, devices text[],
                                  doc jsonb, PRIMARY KEY (org, k))",
    )
    .execute(&pool)
    .await
    .unwrap();
    let org = uuid::Uuid::new_v4();
    // Enough rows that the VALUES form needs several statements (7 parameters a row, 60,000 a statement).
    let n = 20_000_i64;
    let keys: Vec<i64> = (0..n).collect();
    let names: Vec<String> = keys.iter().map(|k| format!("n{k}, with 'quotes' and ;")).collect();
    let notes: Vec<Option<&str>> = keys.iter().map(|k| (k % 3 == 0).then_some("third")).collect();
    let at: Vec<time::OffsetDateTime> =
        keys.iter().map(|k| time::macros::datetime!(2026-11-01 00:00 UTC) + time::Duration::seconds(*k)).collect();
    let arrays: Vec<Vec<String>> = keys.iter().map(|k| (0..k % 3).map(|i| format!("GPU-{k}-{i}")).collect()).collect();
    let json: Vec<serde_json::Value> = arrays.iter().map(|a| serde_json::json!(a)).collect();
    let docs: Vec<serde_json::Value> = keys.iter().map(|k| serde_json::json!({ "k": k })).collect();
    let mut digests = Vec::new();
    for distributed in [false, true] {
        sqlx::query("TRUNCATE bulk_probe").execute(&pool).await.unwrap();
        // A row already there: ON CONFLICT keeps it, RETURNING leaves it out.
        sqlx::query("INSERT INTO bulk_probe (org, k, name) VALUES ($1, 7, 'kept')")
            .bind(org)
            .execute(&pool)
            .await
            .unwrap();
        let insert = Insert {
            into: "INSERT INTO bulk_probe (org, k, name, note, at, devices, doc)",
            row: "$1, {0}, {1}, {2}, {3}, {4}, {5}",
            consts: &[constant("uuid", &org)],
            cols: &[
                col("bigint", &keys),
                col("text", &names),
                col("text", &notes),
                col("timestamptz", &at),
                text_arrays(&json, &arrays),
                col("jsonb", &docs),
            ],
            tail: "ON CONFLICT DO NOTHING RETURNING k",
        };
        let statements = insert.statements(distributed).unwrap();
        assert_eq!(statements.len(), if distributed { 3 } else { 1 });
        let mut returned = 0;
        for (sql, args) in statements {
            returned += sqlx::query_with(&sql, args).fetch_all(&pool).await.unwrap().len();
        }
        assert_eq!(returned, n as usize - 1, "every row but the one already there");
        let row = sqlx::query(
            "SELECT md5(string_agg(concat_ws('|', org, k, name, note, at, devices, doc), ',' ORDER BY k)), count(*)
               FROM bulk_probe",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        digests.push((row.get::<String, _>(0), row.get::<i64, _>(1)));
    }
    assert_eq!(digests[0], digests[1]);
    assert_eq!(digests[0].1, n);
}
