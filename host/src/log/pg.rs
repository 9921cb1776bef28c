//! The fleet store (SPEC 13): a lineage's log on PostgreSQL, as a [`Store`].
//!
//! Every record is stored as the exact line the local log writes (framed,
//! chained and, with an operator key, authenticated by the writer: the key
//! never reaches the server), so a lineage exported from the database is a
//! log file `effects log verify` reads unchanged. Beside each line the server
//! keeps what its backstops need: the position, the byte offset, the chain
//! (`prev`, `check`) and the claim an outcome settles.
//!
//! ```text
//! effects_heads    (lineage PK, records, bytes, head_check)     one row per lineage
//! effects_lines    (lineage, position) PK, byte_offset, prev, check_hex,
//!                  settles, running, launch, line               one row per record
//! effects_sidecars (lineage, name) PK, bytes                    checkpoints (LOG-10)
//! effects_leases   writer PK, holder, ttl, expires               writer leases (LOG-7)
//! effects_schema   version                                       one row: the schema's version
//! ```
//!
//! A database whose `effects_schema` names another version than this
//! build's is refused with both versions named: no build writes a shape its
//! readers do not expect.
//!
//! **One round trip per append, which checks the head**:
//! `effects_append(lineage, records, bytes, lines, prevs, checks, settles,
//! running, claims, recovers, launches, writer)` locks the lineage's head
//! row, and appends only if the head is where the writer says (answering
//! `appended`); otherwise it appends nothing and answers the lines after
//! the writer's head (a head ahead of its lines is an error), which the
//! writer merges before it validates again ([`Written::Missed`]). The
//! backstops, whatever a writer sends: a primary key on (lineage, position),
//! each line's `prev` equal to the record before it's `check` (checked by
//! the function), at most one settling outcome and one RUNNING outcome per
//! claim (unique indexes).
//!
//! **One line at the head** (a claim, an outcome: nearly every append) is
//! sent as [`APPEND_ONE`] instead: one statement that appends only under a
//! live lease, at the head, continuing its check, without the function's
//! per-transaction cost (a PL/pgSQL call cost a claim about half its time
//! again). It neither locks nor renews the lease, and it answers a refusal
//! as "nothing appended". Then the lines after the writer's head are read
//! and merged as the function's would be (a second round trip, and no
//! flush); with none to read, the function is asked why. A batch,
//! recovery's outcomes, a resend, and an append under a lease the heartbeat
//! has not renewed for half its length always go through the function.
//!
//! **Durable when acknowledged**: the session runs with `synchronous_commit`
//! at least `on` (raised when the server says `off` or `local`), so the
//! server has flushed the commit to its WAL before it answers. A lost answer
//! (the connection dropped after sending) is settled by sending the same
//! lines at the same head again on a new connection: the function takes
//! byte-identical lines already at those positions as this append, done.
//! It never concludes "absent" from a read.
//!
//! **The launch index** (LOG-8) is the claim's own row: a launch claim
//! carries the generation it names ([`PgStore::launch_claim`]), so there is
//! no moment at which the claim is durable and its index entry is not.
//!
//! **Writer leases** (LOG-7 across machines): a process that writes holds a
//! lease on the server's clock (`effects_leases`), renewed by a heartbeat
//! thread and by an append that finds it past half its length; each line records the lease that wrote it. An
//! append under an expired lease is refused, so a writer paused past its
//! lease never settles late. A claim is known dead when the lease that wrote
//! it has expired and the claim's executor is that lease's holder (the
//! writing process itself: a claim made for another process, a hook's for
//! its agent, is not the lease's to vouch for): [`PgStore::expired_claims`].

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use postgres::{Client, NoTls, Statement};

use super::record::Position;
use super::storage::{LockKind, Sidecar};
use super::store::{After, AppendFailed, Head, LineMeta, Store, Written};

/// The schema, created once per database by [`ensure_schema`] (under an
/// advisory lock, so two first writers do not race on `CREATE`).
const SCHEMA: &str = r#"
CREATE TABLE effects_schema (
    version integer NOT NULL CHECK (version > 0),
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row)
);
CREATE TABLE effects_heads (
    lineage    text PRIMARY KEY,
    records    bigint NOT NULL CHECK (records >= 0),
    bytes      bigint NOT NULL CHECK (bytes >= 0),
    head_check text NOT NULL,
    created    timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE effects_leases (
    writer  text PRIMARY KEY,
    holder  text NOT NULL,
    ttl     interval NOT NULL,
    expires timestamptz NOT NULL
);
-- No foreign keys and no unique chain index on the lines: effects_append
-- (and the one-line statement, APPEND_ONE) hold both invariants (each
-- appends only under a live lease, at the head, continuing its check), and
-- each would cost a trigger or an index entry
-- per append. The primary key and the settlement indexes are the backstops.
CREATE TABLE effects_lines (
    lineage     text NOT NULL,
    position    bigint NOT NULL CHECK (position >= 0),
    byte_offset bigint NOT NULL CHECK (byte_offset >= 0),
    prev        text NOT NULL,
    check_hex   text NOT NULL,
    settles     bigint,
    running     bigint,
    is_claim    boolean NOT NULL,
    launch      bigint,
    writer      text NOT NULL,
    line        bytea NOT NULL,
    PRIMARY KEY (lineage, position)
);
CREATE UNIQUE INDEX effects_lines_one_settlement
    ON effects_lines (lineage, settles) WHERE settles IS NOT NULL;
CREATE UNIQUE INDEX effects_lines_one_running
    ON effects_lines (lineage, running) WHERE running IS NOT NULL;
CREATE INDEX effects_lines_claims ON effects_lines (lineage, writer) WHERE is_claim;
-- The launch index (LOG-8): a launch's claim carries its generation.
CREATE INDEX effects_lines_launch ON effects_lines (lineage, launch) WHERE launch IS NOT NULL;
CREATE TABLE effects_sidecars (
    lineage text NOT NULL REFERENCES effects_heads (lineage),
    name    text NOT NULL,
    bytes   bytea NOT NULL,
    PRIMARY KEY (lineage, name)
);
CREATE OR REPLACE FUNCTION effects_append(
    p_lineage text, p_records bigint, p_bytes bigint, p_lines bytea[],
    p_prevs text[], p_checks text[], p_settles bigint[], p_running bigint[], p_claims boolean[],
    p_recovers boolean[], p_launches bigint[], p_writer text
) RETURNS TABLE (appended boolean, missed bytea) LANGUAGE plpgsql AS $fn$
DECLARE
    head effects_heads;
    lease effects_leases;
    other effects_leases;
    n integer := cardinality(p_lines);
    found_lines bigint;
BEGIN
    -- A NULL array has no cardinality: coalesced, it is refused too.
    IF n IS NULL OR n = 0 OR coalesce(cardinality(p_prevs), -1) <> n OR coalesce(cardinality(p_checks), -1) <> n
       OR coalesce(cardinality(p_settles), -1) <> n OR coalesce(cardinality(p_running), -1) <> n
       OR coalesce(cardinality(p_claims), -1) <> n OR coalesce(cardinality(p_recovers), -1) <> n
       OR coalesce(cardinality(p_launches), -1) <> n THEN
        RAISE EXCEPTION 'effects_append: % lines with unequal columns', n USING ERRCODE = '22023';
    END IF;
    -- Shared: a recovery of this writer's claims (below, in another
    -- writer's append) waits for this append, or this one for it.
    SELECT * INTO lease FROM effects_leases WHERE writer = p_writer FOR SHARE;
    IF NOT FOUND OR lease.expires < clock_timestamp() THEN
        RAISE EXCEPTION 'effects_append: writer %''s lease has expired; its appends are refused and its own claims are recovered by others',
            p_writer USING ERRCODE = 'EL001';
    END IF;
    -- Renewed here only past half its length (the heartbeat renews it too):
    -- a row update per append would cost as much WAL as the line itself.
    IF lease.expires < clock_timestamp() + lease.ttl / 2 THEN
        UPDATE effects_leases SET expires = clock_timestamp() + lease.ttl WHERE writer = p_writer;
    END IF;
    -- Recovery's outcomes (LOG-7) settle a claim only while the lease that
    -- wrote it is still expired: those leases are locked, so a renewal in
    -- flight commits before this looks, or cannot commit after it. Asked
    -- only by a recovery: planned generically, the query cost every append
    -- time in proportion to the leases and lines the database holds.
    IF true = ANY (p_recovers) THEN
        FOR other IN
            SELECT k.* FROM effects_leases k
            WHERE k.writer IN (
                SELECT c.writer FROM effects_lines c
                WHERE c.lineage = p_lineage
                  AND c.position IN (SELECT r.claim FROM unnest(p_settles, p_recovers) AS r (claim, recovers)
                                     WHERE r.recovers))
            ORDER BY k.writer
            FOR UPDATE
        LOOP
            IF other.expires >= clock_timestamp() THEN
                RAISE EXCEPTION 'effects_append: writer %''s lease is live again; its claims are its own to settle',
                    other.writer USING ERRCODE = 'EL002';
            END IF;
        END LOOP;
    END IF;
    FOR i IN 2 .. n LOOP
        IF p_prevs[i] <> p_checks[i - 1] THEN
            RAISE EXCEPTION 'effects_append: line % does not continue the chain', i USING ERRCODE = '23514';
        END IF;
    END LOOP;
    -- The compare-and-append: the head moves only from where the writer
    -- says it is (the row lock orders concurrent appends; one that waited
    -- re-reads the head and finds it moved).
    UPDATE effects_heads
        SET records = p_records + n,
            bytes = p_bytes + (SELECT sum(length(l)) FROM unnest(p_lines) AS l),
            head_check = p_checks[n]
        WHERE lineage = p_lineage AND records = p_records AND bytes = p_bytes AND head_check = p_prevs[1];
    IF FOUND THEN
        INSERT INTO effects_lines
                (lineage, position, byte_offset, prev, check_hex, settles, running, is_claim, launch, writer, line)
            SELECT p_lineage, p_records + u.o - 1,
                   p_bytes + coalesce(sum(length(u.l)) OVER (ORDER BY u.o ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0),
                   u.pr, u.ch, u.st, u.ru, u.cl, u.la, p_writer, u.l
            FROM unnest(p_lines, p_prevs, p_checks, p_settles, p_running, p_claims, p_launches) WITH ORDINALITY
                AS u (l, pr, ch, st, ru, cl, la, o);
        RETURN QUERY SELECT true, NULL::bytea;
        RETURN;
    END IF;
    -- Not at the head: say why.
    SELECT * INTO head FROM effects_heads WHERE lineage = p_lineage;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'effects_append: lineage % has no log', p_lineage USING ERRCODE = '42704';
    END IF;
    IF head.records < p_records THEN
        RAISE EXCEPTION 'effects_append: lineage % holds % records, fewer than the % its writer read: the store lost records it acknowledged',
            p_lineage, head.records, p_records USING ERRCODE = 'XX001';
    END IF;
    IF head.records = p_records THEN
        RAISE EXCEPTION 'effects_append: lineage % head is at byte % check %, the writer says byte % check %',
            p_lineage, head.bytes, head.head_check, p_bytes, p_prevs[1] USING ERRCODE = '23514';
    END IF;
    -- The same lines at the same head again: a resend after a lost answer.
    IF head.records >= p_records + n AND p_lines = ARRAY(
        SELECT line FROM effects_lines
        WHERE lineage = p_lineage AND position >= p_records AND position < p_records + n
        ORDER BY position) THEN
        RETURN QUERY SELECT true, NULL::bytea;
        RETURN;
    END IF;
    RETURN QUERY SELECT false, line FROM effects_lines
        WHERE lineage = p_lineage AND position >= p_records ORDER BY position;
    -- A head ahead of its lines (a partial restore) is no answer to merge.
    -- More lines than the head read are appends committed since (each
    -- statement reads the latest commits).
    GET DIAGNOSTICS found_lines = ROW_COUNT;
    IF found_lines < head.records - p_records THEN
        RAISE EXCEPTION 'effects_append: lineage % has its head at % records but % lines after %: the store is damaged',
            p_lineage, head.records, found_lines, p_records USING ERRCODE = 'XX001';
    END IF;
END
$fn$;
"#;

/// One line at the head, in one statement (no PL/pgSQL call): the writer's
/// lease must be live, the head moves only from where the writer says and
/// only to this line's check, and the line is inserted where the head was.
/// It reports one row inserted, or none: then nothing changed.
///
/// The lease is judged at the statement's start (`statement_timestamp()`,
/// stable for the planner, where the volatile `clock_timestamp()` cost a
/// claim 4%): the function too judges it before it waits for the head row.
///
/// The lease is read, not locked as `effects_append` locks it: a recovery
/// of this writer's claims on this lineage appends through the same head
/// row, so one of the two waits for the other and finds the head moved.
/// Unlocked, a statement that finds the head moved wrote nothing, and its
/// commit waits for no WAL flush: under contention a miss costs a round
/// trip, not a flush. Nor is the lease renewed here (a data-modifying
/// clause cost a claim a fifth of its time): the heartbeat renews it, and
/// once the heartbeat has not for half the lease's length, appends go
/// through the function, which does (`Lease::fresh`).
///
/// `$1` lineage, `$2` records, `$3` bytes, `$4` line, `$5` prev, `$6` check,
/// `$7` settles, `$8` running, `$9` is a claim, `$10` launch, `$11` writer.
pub const APPEND_ONE: &str = "\
WITH head AS (
    UPDATE effects_heads h
       SET records = $2 + 1, bytes = $3 + length($4::bytea), head_check = $6::text
     WHERE h.lineage = $1 AND h.records = $2 AND h.bytes = $3 AND h.head_check = $5::text
       AND EXISTS (SELECT FROM effects_leases k WHERE k.writer = $11 AND k.expires >= statement_timestamp())
    RETURNING h.lineage
)
INSERT INTO effects_lines
       (lineage, position, byte_offset, prev, check_hex, settles, running, is_claim, launch, writer, line)
SELECT lineage, $2, $3, $5, $6, $7::bigint, $8::bigint, $9::boolean, $10::bigint, $11::text, $4 FROM head";

/// The version of the schema this build reads and writes, kept in
/// `effects_schema`: a database made by a build that speaks another is
/// refused, never written in a shape its readers do not expect.
pub const SCHEMA_VERSION: i32 = 3;

/// The `prev` of a lineage's first record, as the server keeps it.
const GENESIS_HEX: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// How often, and how long apart, a lost answer is asked again.
const RESENDS: u32 = 10;
const RESEND_PAUSE: Duration = Duration::from_millis(200);

/// A connection and the statements prepared on it.
struct Session {
    client: Client,
    append: Statement,
    append_one: Statement,
    read: Statement,
}

impl Session {
    /// A session on a database holding our schema; with `create`, the
    /// schema is created on a database that has none, else that is `None`.
    fn connect(url: &str, create: bool) -> io::Result<Option<Self>> {
        let mut client = Client::connect(url, NoTls).map_err(io_error)?;
        if schema_version(&mut client)?.is_none() {
            if !create {
                return Ok(None);
            }
            ensure_schema(&mut client)?;
        }
        Self::prepare(client).map(Some).map_err(io_error)
    }

    fn prepare(mut client: Client) -> Result<Self, postgres::Error> {
        // Each statement sees the latest commits (the compare-and-append
        // and its "why not" rely on it), whatever the server's default.
        client.batch_execute("SET default_transaction_isolation TO 'read committed'")?;
        // Durable when acknowledged: never below `on` (a replica's promise
        // is the operator's setting on top of that: docs/fleet.md).
        let level: String = client.query_one("SHOW synchronous_commit", &[])?.get(0);
        if matches!(level.as_str(), "off" | "local") {
            client.batch_execute("SET synchronous_commit TO on")?;
        }
        let append = client.prepare(
            "SELECT appended, missed FROM effects_append($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        )?;
        let append_one = client.prepare(APPEND_ONE)?;
        let read = client.prepare(
            "SELECT h.records, h.bytes, l.line FROM effects_heads h \
             LEFT JOIN effects_lines l ON l.lineage = h.lineage AND l.position >= $2 \
             WHERE h.lineage = $1 ORDER BY l.position",
        )?;
        Ok(Self { client, append, append_one, read })
    }
}

/// The database's schema version: `None` when it holds no schema of ours,
/// an error naming both versions when it holds another than [`SCHEMA`].
fn schema_version(client: &mut impl postgres::GenericClient) -> io::Result<Option<i32>> {
    // Asked by name first: a failed SELECT would abort the caller's
    // transaction.
    let tables = client
        .query_one(
            "SELECT to_regclass('effects_schema') IS NOT NULL, to_regclass('effects_heads') IS NOT NULL",
            &[],
        )
        .map_err(io_error)?;
    let version = match (tables.get::<_, bool>(0), tables.get::<_, bool>(1)) {
        (true, _) => client
            .query_opt("SELECT version FROM effects_schema", &[])
            .map_err(io_error)?
            .map(|row| row.get::<_, i32>(0)),
        // Effects tables without a version were made before versions were
        // kept.
        (false, true) => Some(0),
        (false, false) => return Ok(None),
    };
    match version {
        Some(SCHEMA_VERSION) => Ok(Some(SCHEMA_VERSION)),
        other => Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "this database's effects schema is version {}, and this build reads and writes version \
                 {SCHEMA_VERSION} only: use a build of its version to export its lineages (`effects log export`), \
                 or a database of its own for this one",
                other.unwrap_or_default()
            ),
        )),
    }
}

/// Creates the schema unless the database has it: run by a
/// [`PgStore::open`] that creates a lineage and finds none. Serialized by an
/// advisory lock, so two first writers do not race on `CREATE`.
fn ensure_schema(client: &mut Client) -> io::Result<()> {
    // Read committed: the version a first writer that held the lock before
    // us committed is seen once the lock is ours.
    let mut transaction = client
        .build_transaction()
        .isolation_level(postgres::IsolationLevel::ReadCommitted)
        .start()
        .map_err(io_error)?;
    transaction.batch_execute("SELECT pg_advisory_xact_lock(7239001)").map_err(io_error)?;
    if schema_version(&mut transaction)?.is_none() {
        transaction.batch_execute(SCHEMA).map_err(io_error)?;
        transaction
            .execute("INSERT INTO effects_schema (version) VALUES ($1)", &[&SCHEMA_VERSION])
            .map_err(io_error)?;
    }
    transaction.commit().map_err(io_error)
}

impl Lease {
    /// Takes a lease of `length` for this process, and starts its heartbeat.
    fn take(url: &str, client: &mut Client, length: Duration) -> io::Result<Self> {
        let writer = format!("w-{}", uuid::Uuid::now_v7().simple());
        let holder = serde_json::to_string(&crate::executor::current()).map_err(io::Error::other)?;
        let millis = i64::try_from(length.as_millis()).map_err(io::Error::other)?;
        // Read before asking: the server's clock starts the lease later.
        let asked = boot_clock();
        client
            .execute(
                "INSERT INTO effects_leases (writer, holder, ttl, expires) \
                 VALUES ($1, $2, $3::bigint * interval '1 millisecond', \
                 clock_timestamp() + $3::bigint * interval '1 millisecond')",
                &[&writer, &holder, &millis],
            )
            .map_err(io_error)?;
        let last_renewal = Arc::new(Mutex::new(asked));
        let beat = Arc::clone(&last_renewal);
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let mut heartbeat = Some(Client::connect(url, NoTls).map_err(io_error)?);
        let (renewed, url) = (writer.clone(), url.to_owned());
        std::thread::Builder::new().name("effects-lease".into()).spawn(move || {
            // Until the handle drops (the sender with it) or the lease is
            // lost: a lease that expired is never renewed again. A lost
            // connection (a server restart) is made again at the next beat.
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(length / 3) {
                let client = match heartbeat.as_mut() {
                    Some(client) => client,
                    None => match Client::connect(&url, NoTls) {
                        Ok(client) => heartbeat.insert(client),
                        Err(error) => {
                            tracing::warn!(writer = %renewed, "renewing the lease failed: {error}");
                            continue;
                        }
                    },
                };
                let asked = boot_clock();
                let renewal = client.execute(
                    "UPDATE effects_leases SET expires = clock_timestamp() + ttl \
                     WHERE writer = $1 AND expires >= clock_timestamp()",
                    &[&renewed],
                );
                match renewal {
                    Ok(1) => *beat.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = asked,
                    Ok(_) => {
                        tracing::warn!(writer = %renewed, "this writer's lease expired; its appends are refused");
                        return;
                    }
                    Err(error) => {
                        tracing::warn!(writer = %renewed, "renewing the lease failed: {error}");
                        if !refused(&error) {
                            heartbeat = None;
                        }
                    }
                }
            }
        })?;
        Ok(Self { writer, length, renewed: last_renewal, _stop: stop })
    }

    /// Whether the server renewed the lease less than half its length ago,
    /// as this process saw it: then it has at least half its length left,
    /// and an append need not renew it ([`APPEND_ONE`]). Only a choice of
    /// path: the server judges the lease on every append either way.
    fn fresh(&self) -> bool {
        let renewed = *self.renewed.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        boot_clock().saturating_sub(renewed) < self.length / 2
    }
}

/// Time since boot, suspend included (`CLOCK_BOOTTIME`): a machine that
/// slept, or a VM that was frozen, finds its lease no longer fresh, where the
/// monotonic clock would have stood still.
fn boot_clock() -> Duration {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    Duration::new(now.tv_sec.unsigned_abs(), now.tv_nsec.clamp(0, 999_999_999) as u32)
}

/// Whether the server answered `error` to the statement itself, so its
/// transaction rolled back and nothing of it is there. A lost connection,
/// or the server ending the session (a FATAL error: shutdown, an
/// administrator's `pg_terminate_backend`, class 08 or 57), says nothing of
/// what a statement already sent did.
fn refused(error: &postgres::Error) -> bool {
    let Some(db) = error.as_db_error() else { return false };
    let code = db.code().code();
    !error.is_closed()
        && !matches!(db.severity(), "FATAL" | "PANIC")
        && !code.starts_with("08")
        && !code.starts_with("57")
}

/// What the server said when it refused a statement: its SQLSTATE and
/// message, inside the `io::Error` a refusal becomes.
#[derive(Debug)]
pub struct ServerRefusal {
    /// The SQLSTATE (`EL001`: the writer's lease expired; `EL002`: a
    /// recovered claim's writer holds its lease again).
    pub code: String,
    message: String,
}

impl std::fmt::Display for ServerRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PostgreSQL: {}", self.message)
    }
}

impl std::error::Error for ServerRefusal {}

impl ServerRefusal {
    /// The refusal inside `error`, if the server refused the statement.
    pub fn of(error: &io::Error) -> Option<&ServerRefusal> {
        error.get_ref()?.downcast_ref()
    }
}

/// The error as IO sees it: `InvalidData` carrying a [`ServerRefusal`] when
/// the server refused the statement ([`refused`]), `Other` when its answer
/// may have been lost.
fn io_error(error: postgres::Error) -> io::Error {
    match error.as_db_error() {
        Some(db) if refused(&error) => io::Error::new(
            io::ErrorKind::InvalidData,
            ServerRefusal { code: db.code().code().to_owned(), message: db.message().to_owned() },
        ),
        Some(db) => io::Error::other(format!("PostgreSQL: {}", db.message())),
        None => io::Error::other(format!("PostgreSQL: {error}")),
    }
}

/// One lineage's log on a PostgreSQL server.
pub struct PgStore {
    url: String,
    lineage: String,
    /// `None` after a connection was lost, until the next call reconnects.
    session: Mutex<Option<Box<Session>>>,
    /// The lease this handle appends under; a reader has none, and the
    /// server refuses its appends.
    lease: Option<Lease>,
    /// First attempts in a row that [`APPEND_ONE`] did not append: past
    /// [`FAST_MISSES`] the function is asked, which names a refusal (an
    /// expired lease) that busy co-writers would otherwise hide behind lines
    /// to merge.
    fast_misses: u32,
}

/// What the read statement answers: a lineage's head, and its lines from a
/// position on.
struct Tail {
    /// Records and bytes the head counts.
    records: Position,
    bytes: u64,
    /// The lines read, and how many.
    lines: Vec<u8>,
    count: u64,
}

/// A writer's lease and the thread that renews it.
struct Lease {
    writer: String,
    length: Duration,
    /// When this process last asked for a renewal the server granted (the
    /// lease taken, or a heartbeat answered), on [`boot_clock`]: the lease
    /// runs at least its length from then.
    renewed: Arc<Mutex<Duration>>,
    /// Dropping it stops the heartbeat.
    _stop: std::sync::mpsc::Sender<()>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").field("lineage", &self.lineage).finish_non_exhaustive()
    }
}

/// How many first attempts in a row may miss through [`APPEND_ONE`] before
/// the next goes through `effects_append`.
const FAST_MISSES: u32 = 4;

/// How long a writer's lease lasts without renewal, unless the caller says.
pub const LEASE: Duration = Duration::from_secs(30);

impl PgStore {
    /// `lineage`'s log on the server at `url`. With `create` the schema and
    /// the lineage are created if missing; without, a lineage the server does
    /// not hold is `None`. With `lease` this handle may append: it takes a
    /// lease of that length, held by this process, renewed every third of
    /// its length by a heartbeat thread while the handle lives (and by an
    /// append through `effects_append` that finds it past half its length).
    pub fn open(url: &str, lineage: &str, create: bool, lease: Option<Duration>) -> io::Result<Option<Self>> {
        let Some(mut session) = Session::connect(url, create)? else { return Ok(None) };
        let exists = if create {
            session
                .client
                .execute(
                    "INSERT INTO effects_heads (lineage, records, bytes, head_check) VALUES ($1, 0, 0, $2) \
                     ON CONFLICT (lineage) DO NOTHING",
                    &[&lineage, &GENESIS_HEX],
                )
                .map_err(io_error)?;
            true
        } else {
            session
                .client
                .query_opt("SELECT 1 FROM effects_heads WHERE lineage = $1", &[&lineage])
                .map_err(io_error)?
                .is_some()
        };
        if !exists {
            return Ok(None);
        }
        let lease = match lease {
            Some(length) => Some(Lease::take(url, &mut session.client, length)?),
            None => None,
        };
        Ok(Some(Self {
            url: url.to_owned(),
            lineage: lineage.to_owned(),
            session: Mutex::new(Some(Box::new(session))),
            lease,
            fast_misses: 0,
        }))
    }

    /// The unsettled claims of this lineage whose writer's lease has expired,
    /// by position, each with that lease's holder (the executor its process
    /// records on its own claims, as JSON): the claims LOG-7 may know dead,
    /// when the claim's executor is that holder. The lines are not parsed
    /// here: what they say is read by the writer's own strict reader.
    pub fn expired_claims(&self) -> io::Result<HashMap<Position, String>> {
        let rows = self.with_session(|session| {
            session.client.query(
                "SELECT l.position, k.holder \
                 FROM effects_lines l JOIN effects_leases k ON k.writer = l.writer \
                 WHERE l.lineage = $1 AND l.is_claim AND k.expires < clock_timestamp() \
                 AND NOT EXISTS (SELECT 1 FROM effects_lines s WHERE s.lineage = l.lineage AND s.settles = l.position)",
                &[&self.lineage],
            )
        })?;
        Ok(rows.iter().map(|row| (row.get::<_, i64>(0) as Position, row.get(1))).collect())
    }

    /// LOG-8 on the fleet store: the claim of this lineage that launched
    /// `generation`, the first claim naming it, written in the same
    /// transaction as the index entry is (it is the claim's own row).
    pub fn launch_claim(&self, generation: u64) -> io::Result<Option<Position>> {
        let generation = i64::try_from(generation).map_err(io::Error::other)?;
        let row = self.with_session(|session| {
            session.client.query_one(
                "SELECT min(position) FROM effects_lines WHERE lineage = $1 AND launch = $2 AND is_claim",
                &[&self.lineage, &generation],
            )
        })?;
        Ok(row.get::<_, Option<i64>>(0).map(|position| position as Position))
    }

    /// Every lineage the server holds, sorted.
    pub fn lineages(url: &str) -> io::Result<Vec<String>> {
        let mut client = Client::connect(url, NoTls).map_err(io_error)?;
        match client.query("SELECT lineage FROM effects_heads ORDER BY lineage", &[]) {
            Ok(rows) => Ok(rows.iter().map(|row| row.get(0)).collect()),
            // No schema: nothing was ever claimed here.
            Err(error) if error.code() == Some(&postgres::error::SqlState::UNDEFINED_TABLE) => Ok(Vec::new()),
            Err(error) => Err(io_error(error)),
        }
    }

    /// Runs `f` on a live session, connecting first if the last one was lost.
    fn with_session<T>(&self, f: impl FnOnce(&mut Session) -> Result<T, postgres::Error>) -> io::Result<T> {
        let mut guard = self.session.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if guard.is_none() {
            let session = Session::connect(&self.url, false)?.ok_or_else(|| {
                io::Error::new(io::ErrorKind::NotFound, "the store's effects tables are gone")
            })?;
            *guard = Some(Box::new(session));
        }
        let session = guard.as_mut().expect("connected above");
        let result = f(session);
        if let Err(error) = &result
            && !refused(error)
        {
            *guard = None;
        }
        result.map_err(io_error)
    }

    /// A first attempt at one line (not recovery's), under a lease renewed
    /// less than half its length ago, through [`APPEND_ONE`]: `None` when it
    /// must go through `effects_append` instead. When the statement appends
    /// nothing, the lines appended since this handle's head are read (a read
    /// commits no WAL: under contention a miss costs no flush) and are what
    /// it missed; with none to read, or the read failing, the function is
    /// asked, as it is for a batch, recovery's outcomes, an append whose
    /// lease is due for renewal (the function renews it) and a resend (whose
    /// lines may be the ones already there, which only the function
    /// compares). `Err` keeps the database error apart from a lost
    /// connection.
    fn append_fast(
        &mut self,
        head: Head,
        lines: &[Vec<u8>],
        meta: &[LineMeta],
    ) -> io::Result<Option<Written>> {
        let ([line], [one]) = (lines, meta) else { return Ok(None) };
        if one.recovers || self.fast_misses >= FAST_MISSES || !self.lease.as_ref().is_some_and(Lease::fresh) {
            self.fast_misses = 0;
            return Ok(None);
        }
        if self.append_one(head, line, one)? {
            self.fast_misses = 0;
            return Ok(Some(Written::Appended));
        }
        // Nothing was written: from here on no answer lost can have
        // appended anything.
        self.fast_misses += 1;
        match self.appended_since(head) {
            Ok(Some(missed)) => Ok(Some(Written::Missed(missed))),
            Ok(None) => Ok(None),
            Err(error) => {
                tracing::warn!(lineage = %self.lineage, "reading what an append missed failed ({error}); asking the server why");
                Ok(None)
            }
        }
    }

    /// [`APPEND_ONE`]: whether the line was appended.
    fn append_one(&self, head: Head, line: &[u8], meta: &LineMeta) -> io::Result<bool> {
        let records = i64::try_from(head.records).map_err(io::Error::other)?;
        let bytes = i64::try_from(head.offset).map_err(io::Error::other)?;
        let launch = meta.launch.and_then(|generation| i64::try_from(generation).ok());
        let writer = self.lease.as_ref().map(|lease| lease.writer.as_str());
        let (prev, check) = (hex::encode(meta.prev), hex::encode(meta.check));
        let inserted = self.with_session(|session| {
            session.client.execute(
                &session.append_one,
                &[
                    &self.lineage,
                    &records,
                    &bytes,
                    &line,
                    &prev,
                    &check,
                    &terminal(meta.settles),
                    &running(meta.settles),
                    &meta.claim,
                    &launch,
                    &writer,
                ],
            )
        })?;
        Ok(inserted == 1)
    }

    /// The lines after `head` when the lineage holds more records than it;
    /// `None` when it holds no more, or fewer lines than its head counts
    /// (the function names that damage).
    fn appended_since(&self, head: Head) -> io::Result<Option<Vec<u8>>> {
        Ok(self.tail(head.records)?.and_then(|tail| {
            (tail.records > head.records && tail.count == tail.records - head.records).then_some(tail.lines)
        }))
    }

    /// The lineage's head and its lines from position `from` on, read in one
    /// snapshot; `None` when the server holds no such lineage.
    fn tail(&self, from: Position) -> io::Result<Option<Tail>> {
        let from = i64::try_from(from).map_err(io::Error::other)?;
        let rows =
            self.with_session(|session| session.client.query(&session.read, &[&self.lineage, &from]))?;
        let Some(first) = rows.first() else { return Ok(None) };
        let unsigned = |n: i64| u64::try_from(n).map_err(io::Error::other);
        let mut tail = Tail {
            records: unsigned(first.get(0))?,
            bytes: unsigned(first.get(1))?,
            lines: Vec::new(),
            count: 0,
        };
        for line in rows.iter().filter_map(|row| row.get::<_, Option<&[u8]>>(2)) {
            tail.lines.extend_from_slice(line);
            tail.count += 1;
        }
        Ok(Some(tail))
    }

    /// One call of `effects_append`; `Err` keeps the database error apart
    /// from a lost connection.
    fn call_function(&self, head: Head, lines: &[Vec<u8>], meta: &[LineMeta]) -> io::Result<Written> {
        let records = i64::try_from(head.records).map_err(io::Error::other)?;
        let bytes = i64::try_from(head.offset).map_err(io::Error::other)?;
        let prevs: Vec<String> = meta.iter().map(|m| hex::encode(m.prev)).collect();
        let checks: Vec<String> = meta.iter().map(|m| hex::encode(m.check)).collect();
        let settles: Vec<Option<i64>> = meta.iter().map(|m| terminal(m.settles)).collect();
        let running: Vec<Option<i64>> = meta.iter().map(|m| running(m.settles)).collect();
        let claims: Vec<bool> = meta.iter().map(|m| m.claim).collect();
        let recovers: Vec<bool> = meta.iter().map(|m| m.recovers).collect();
        let launches: Vec<Option<i64>> =
            meta.iter().map(|m| m.launch.and_then(|generation| i64::try_from(generation).ok())).collect();
        let writer = self.lease.as_ref().map(|lease| lease.writer.as_str());
        self.with_session(|session| {
            let rows = session.client.query(
                &session.append,
                &[
                    &self.lineage,
                    &records,
                    &bytes,
                    &lines,
                    &prevs,
                    &checks,
                    &settles,
                    &running,
                    &claims,
                    &recovers,
                    &launches,
                    &writer,
                ],
            )?;
            Ok(rows)
        })
        .and_then(|rows| match rows.first().map(|row| row.get::<_, bool>(0)) {
            Some(true) => Ok(Written::Appended),
            Some(false) => {
                let mut missed = Vec::new();
                for row in &rows {
                    missed.extend_from_slice(row.get::<_, &[u8]>(1));
                }
                Ok(Written::Missed(missed))
            }
            None => Err(io::Error::other("effects_append answered nothing")),
        })
    }
}

fn terminal(settles: Option<(Position, bool)>) -> Option<i64> {
    settles.filter(|(_, running)| !running).and_then(|(claim, _)| i64::try_from(claim).ok())
}

fn running(settles: Option<(Position, bool)>) -> Option<i64> {
    settles.filter(|(_, running)| *running).and_then(|(claim, _)| i64::try_from(claim).ok())
}

/// Splits framed bytes into their lines, each with its `\n`.
fn split_lines(bytes: &[u8]) -> Vec<Vec<u8>> {
    bytes.split_inclusive(|&b| b == b'\n').map(<[u8]>::to_vec).collect()
}

fn sidecar_name(which: Sidecar) -> &'static str {
    match which {
        Sidecar::Poisoned => "poisoned",
        Sidecar::Checkpoint => "checkpoint",
        Sidecar::Head => "head",
        Sidecar::Sealed => "sealed",
    }
}

impl Store for PgStore {
    fn compares_head(&self) -> bool {
        true
    }

    fn lock(&self, _kind: LockKind) -> io::Result<()> {
        Ok(())
    }

    fn try_lock_exclusive(&self) -> io::Result<bool> {
        Ok(true)
    }

    fn unlock(&self) -> io::Result<()> {
        Ok(())
    }

    fn read_after(&self, head: Head) -> io::Result<After> {
        let Some(tail) = self.tail(head.records)? else {
            return Err(io::Error::new(io::ErrorKind::NotFound, format!("lineage {} is gone", self.lineage)));
        };
        if tail.records < head.records {
            return Ok(After::Shrank { length: tail.bytes });
        }
        Ok(After::Bytes(tail.lines))
    }

    fn read_range(&self, offset: u64, len: u64) -> io::Result<Vec<u8>> {
        let start = i64::try_from(offset).map_err(io::Error::other)?;
        let end = i64::try_from(offset.saturating_add(len)).map_err(io::Error::other)?;
        let rows = self.with_session(|session| {
            session.client.query(
                "SELECT byte_offset, line FROM effects_lines WHERE lineage = $1 \
                 AND byte_offset < $3 AND byte_offset + length(line) > $2 ORDER BY position",
                &[&self.lineage, &start, &end],
            )
        })?;
        let mut bytes = Vec::new();
        for row in &rows {
            let at: i64 = row.get(0);
            let line: &[u8] = row.get(1);
            let from = usize::try_from((start - at).max(0)).map_err(io::Error::other)?;
            let to = usize::try_from((end - at).min(line.len() as i64)).map_err(io::Error::other)?;
            bytes.extend_from_slice(&line[from..to]);
        }
        Ok(bytes)
    }

    /// By the primary key: the line at `position`, answered only if the
    /// server has it at `start..end`. (Version 2 kept an index on
    /// `(lineage, byte_offset)` for reading checkpoints' lines by their
    /// bytes; keeping it up cost every append a tenth of its time.)
    fn read_line(&self, position: Position, start: u64, end: u64) -> io::Result<Vec<u8>> {
        let at = i64::try_from(position).map_err(io::Error::other)?;
        let row = self.with_session(|session| {
            session.client.query_opt(
                "SELECT byte_offset, line FROM effects_lines WHERE lineage = $1 AND position = $2",
                &[&self.lineage, &at],
            )
        })?;
        let not_there = |what: String| io::Error::new(io::ErrorKind::InvalidData, what);
        let Some(row) = row else {
            return Err(not_there(format!("lineage {} has no record {position}", self.lineage)));
        };
        let (offset, line): (i64, Vec<u8>) = (row.get(0), row.get(1));
        if u64::try_from(offset).ok() != Some(start) || start + line.len() as u64 != end {
            return Err(not_there(format!(
                "record {position} is at bytes {offset}..{}, not {start}..{end}",
                offset + line.len() as i64
            )));
        }
        Ok(line)
    }

    fn append_at(&mut self, head: Head, lines: &[u8], meta: &[LineMeta]) -> Result<Written, AppendFailed> {
        let lines = split_lines(lines);
        let first = match self.append_fast(head, &lines, meta).and_then(|fast| match fast {
            Some(written) => Ok(written),
            None => self.call_function(head, &lines, meta),
        }) {
            Ok(written) => return Ok(written),
            // The server refused it: its transaction rolled back, nothing
            // of it is there.
            Err(source) if source.kind() == io::ErrorKind::InvalidData => {
                return Err(AppendFailed { source, unknown: None });
            }
            Err(source) => source,
        };
        // The answer was lost: the lines may or may not have been committed.
        // Ask again with the same lines at the same head until the server
        // says which.
        tracing::warn!(lineage = %self.lineage, "an append's answer was lost ({first}); sending it again");
        let mut last = first;
        for _ in 0..RESENDS {
            std::thread::sleep(RESEND_PAUSE);
            match self.call_function(head, &lines, meta) {
                Ok(written) => return Ok(written),
                Err(source) if source.kind() == io::ErrorKind::InvalidData => {
                    return Err(AppendFailed {
                        unknown: Some(io::Error::other(format!(
                            "the server refused the resend of an append whose answer was lost: {source}"
                        ))),
                        source,
                    });
                }
                Err(source) => last = source,
            }
        }
        Err(AppendFailed {
            unknown: Some(io::Error::other(format!(
                "the server could not be asked again whether a lost append landed: {last}"
            ))),
            source: last,
        })
    }

    fn keep_torn(&mut self, _torn: &[u8]) -> io::Result<()> {
        Err(io::Error::other("a server store holds whole lines only; it has no torn tail"))
    }

    fn cut(&mut self, _at: u64) -> io::Result<()> {
        Err(io::Error::other("a server store is never cut back: a refused append left nothing"))
    }

    fn sync(&mut self, _first: bool) -> io::Result<()> {
        // Every append was durable when the server acknowledged it.
        Ok(())
    }

    fn read_sidecar(&self, which: Sidecar) -> io::Result<Option<Vec<u8>>> {
        let name = sidecar_name(which);
        let row = self.with_session(|session| {
            session.client.query_opt(
                "SELECT bytes FROM effects_sidecars WHERE lineage = $1 AND name = $2",
                &[&self.lineage, &name],
            )
        })?;
        Ok(row.map(|row| row.get(0)))
    }

    fn write_sidecar(&mut self, which: Sidecar, bytes: &[u8]) -> io::Result<()> {
        let name = sidecar_name(which);
        self.with_session(|session| {
            session.client.execute(
                "INSERT INTO effects_sidecars (lineage, name, bytes) VALUES ($1, $2, $3) \
                 ON CONFLICT (lineage, name) DO UPDATE SET bytes = EXCLUDED.bytes",
                &[&self.lineage, &name, &bytes],
            )
        })
        .map(drop)
    }

    fn remove_sidecar(&mut self, which: Sidecar) -> io::Result<()> {
        let name = sidecar_name(which);
        self.with_session(|session| {
            session.client.execute(
                "DELETE FROM effects_sidecars WHERE lineage = $1 AND name = $2",
                &[&self.lineage, &name],
            )
        })
        .map(drop)
    }

    fn length(&self) -> io::Result<u64> {
        let row = self.with_session(|session| {
            session.client.query_one("SELECT bytes FROM effects_heads WHERE lineage = $1", &[&self.lineage])
        })?;
        Ok(row.get::<_, i64>(0) as u64)
    }
}
