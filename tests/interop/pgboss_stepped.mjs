// One real pg-boss instance on a TestClock attached to qcore's schema, stepped by its
// parent (tests/interop/pgboss.py, Stepped), so qcore and pg-boss share one simulated time.
//
// Input, one line each: first a JSON spec
//   { "connectionString": "...", "schema": "...", "start": "<ISO time>", "options": {...} }
// then any number of "tick <ms>" (advance the clock by ms, firing pg-boss's timers in order
// and waiting until it is idle), each answered "ticked", and finally "stop", answered with
// one JSON line { "errors": [...] } (the errors pg-boss emitted).
// The clock's job_now() is read by every session that sets pgboss.test_clock = 'on'.

import { createInterface } from 'node:readline'
import { PgBoss, TestClock } from 'pg-boss'

const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]()
const spec = JSON.parse((await lines.next()).value)
const clock = new TestClock(spec.start)
const boss = new PgBoss({
  connectionString: spec.connectionString,
  schema: spec.schema,
  migrate: false,
  supervise: false,
  clock,
  ...(spec.options || {})
})
const errors = []
boss.on('error', err => errors.push(String((err && err.message) || err)))
await boss.start()
console.log('ready')
for (;;) {
  const { value, done } = await lines.next()
  if (done || value === 'stop') break
  const [verb, ms] = value.split(' ')
  if (verb !== 'tick') throw new Error(`pgboss_stepped: unknown line ${JSON.stringify(value)}`)
  await clock.tick(Number(ms))
  console.log('ticked')
}
await boss.stop({ graceful: false, timeout: 1000 })
console.log(JSON.stringify({ errors }))
process.exit(0)
