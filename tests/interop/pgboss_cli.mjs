// Drives the real pg-boss for qcore's interoperability tests.
//
// Input: one JSON command, as the first argument or on stdin:
//   {
//     "connectionString": "postgresql://...",   // required
//     "schema": "pgboss",                        // optional, pg-boss's default otherwise
//     "backend": "postgres" | "cockroachdb" | ..., // optional
//     "migrate": true | false,                   // optional
//     "options": { ... },                        // more constructor options (win over the above)
//     "actions": [ { "op": "start" }, { "op": "createQueue", "args": ["q", {...}] }, ... ]
//   }
// Each action calls the PgBoss method of that name with `args` (a JSON array) and records
// what it returned. Besides the methods there are:
//   { "op": "sql", "args": [text, values] }   rows of a statement on pg-boss's own pool
//   { "op": "sleep", "args": [ms] }
//   { "op": "rollbackPlans", "args": [schema, version] }  pg-boss's rollback SQL (12.x only)
//   { "op": "drain", "args": [queue, workOptions, ms] }  runs a pg-boss worker for ms
//                                       milliseconds; the ids of the jobs it handled
// An action that throws ends the run unless it says "allowError": true.
// By default the instance neither supervises nor schedules (quiet and deterministic);
// pass them in "options" to turn them on. A started instance is stopped at the end.
//
// Output (stdout, one line): { "ok": bool, "results": [ { "op", "result" } | { "op", "error" } ],
//                              "errors": [ ...errors pg-boss emitted ] }

import * as pgBoss from 'pg-boss'

// pg-boss 12 exports the class by name; 10 and 11 are CommonJS and export it as default
const PgBoss = pgBoss.PgBoss ?? pgBoss.default

function describeError (err) {
  if (!(err instanceof Error)) return { message: String(err) }
  const out = { name: err.name, message: err.message }
  for (const key of ['code', 'detail', 'schema', 'table', 'constraint']) {
    if (err[key] !== undefined) out[key] = err[key]
  }
  out.stack = err.stack
  return out
}

function toJson (value) {
  return JSON.parse(JSON.stringify(value === undefined ? null : value, (key, v) =>
    typeof v === 'bigint' ? v.toString() : v
  ))
}

async function readCommand () {
  if (process.argv[2]) return JSON.parse(process.argv[2])
  const chunks = []
  for await (const chunk of process.stdin) chunks.push(chunk)
  return JSON.parse(Buffer.concat(chunks).toString('utf8'))
}

async function main () {
  const command = await readCommand()
  const config = {
    connectionString: command.connectionString,
    supervise: false,
    schedule: false
  }
  for (const key of ['schema', 'backend', 'migrate']) {
    if (command[key] !== undefined) config[key] = command[key]
  }
  Object.assign(config, command.options || {})

  const boss = new PgBoss(config)
  const errors = []
  boss.on('error', err => errors.push(describeError(err)))

  const results = []
  let ok = true
  let started = false
  let stopped = false
  for (const action of command.actions || []) {
    const op = action.op
    const args = action.args || []
    try {
      let result
      if (op === 'rollbackPlans') {
        result = pgBoss.getRollbackPlans(...args)
      } else if (op === 'sql') {
        result = (await boss.getDb().executeSql(args[0], args[1] || [])).rows
      } else if (op === 'previewSchedule') {
        // JSON has no Date: `from` travels as ISO text
        const [cron, options = {}] = args
        const from = options.from === undefined ? undefined : new Date(options.from)
        result = boss.previewSchedule(cron, { ...options, from })
      } else if (op === 'sleep') {
        await new Promise(resolve => setTimeout(resolve, args[0] || 0))
        result = null
      } else if (op === 'drain') {
        const [queue, workOptions = {}, ms = 3000] = args
        const handled = []
        const id = await boss.work(queue, { pollingIntervalSeconds: 0.5, ...workOptions },
          async jobs => { for (const job of jobs) handled.push(job.id) })
        await new Promise(resolve => setTimeout(resolve, ms))
        await boss.offWork(queue, { id })
        result = handled
      } else if (typeof boss[op] === 'function') {
        result = await boss[op](...args)
        if (op === 'start') started = true
        if (op === 'stop') stopped = true
      } else {
        throw new Error(`pgboss_cli: unknown op ${JSON.stringify(op)}`)
      }
      results.push({ op, result: toJson(result) })
    } catch (err) {
      results.push({ op, error: describeError(err) })
      if (!action.allowError) {
        ok = false
        break
      }
    }
  }
  if (started && !stopped) {
    try {
      await boss.stop({ graceful: false, timeout: 1000 })
    } catch (err) {
      errors.push(describeError(err))
    }
  }
  process.stdout.write(JSON.stringify({ ok, results, errors }) + '\n')
}

main().then(
  () => process.exit(0),
  err => {
    process.stdout.write(JSON.stringify({ ok: false, results: [], errors: [describeError(err)] }) + '\n')
    process.exit(1)
  }
)
