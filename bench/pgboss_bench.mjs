// The pg-boss side of a bench scenario: reads a JSON spec line on stdin, starts
// pg-boss on the schema qcore installed and opens its pool, prints "ready", waits for
// a "go" line, runs the scenario's timed half and prints one JSON line: {elapsed,
// jobs, client_cpu_s}; it stops once stdin closes. The parent (bench/pgboss.py) reads
// the server's CPU between "go" and the result, as for every other side.
import { createInterface } from 'node:readline'
import { PgBoss } from 'pg-boss'

const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]()
const spec = JSON.parse((await lines.next()).value)

const payload = i => ({ i, pad: 'x'.repeat(spec.pad) })

// print the result, then keep the connections open until the parent closes stdin: it
// reads the server's CPU of these connections after the result, and a backend that has
// exited by then is not counted
async function finish (result) {
  console.log(JSON.stringify(result))
  await lines.next()
  await boss.stop({ graceful: false, timeout: 1000 })
  process.exit(0)
}

const boss = new PgBoss({
  connectionString: spec.dsn,
  schema: spec.schema,
  migrate: false,
  supervise: false,
  schedule: false,
  // the wake-up scenario measures LISTEN/NOTIFY, which pg-boss leaves off by default
  useListenNotify: spec.scenario === 'wakeup_latency',
  max: spec.pool,
  application_name: spec.application_name
})
boss.on('error', err => { console.error(err) })
await boss.start()

// open the pool's connections before the clock starts, as the other sides do
await Promise.all(Array.from({ length: spec.pool }, () => boss.getDb().executeSql('SELECT pg_sleep(0.02)')))

console.log('ready')
await lines.next() // "go"
const cpu0 = process.cpuUsage()
const start = performance.now()
let jobs = 0
if (spec.scenario === 'bulk_enqueue') {
  for (let first = 0; first < spec.jobs; first += 1000) {
    const batch = []
    for (let i = first; i < Math.min(first + 1000, spec.jobs); i++) batch.push({ data: payload(i) })
    await boss.insert(spec.queue, batch)
    jobs += batch.length
  }
} else if (spec.scenario === 'single_enqueue') {
  let next = 0
  await Promise.all(Array.from({ length: spec.concurrency }, async () => {
    while (next < spec.jobs) {
      const i = next++
      await boss.send(spec.queue, payload(i))
      jobs++
    }
  }))
} else if (spec.scenario === 'batch_drain') {
  await Promise.all(Array.from({ length: spec.concurrency }, async () => {
    while (jobs < spec.jobs) {
      const claimed = await boss.fetch(spec.queue, { batchSize: spec.batch, ...spec.fetch_options })
      if (claimed.length) {
        await boss.complete(spec.queue, claimed.map(j => j.id))
        jobs += claimed.length
      } else {
        await new Promise(resolve => setTimeout(resolve, 1))
      }
    }
  }))
} else if (spec.scenario === 'worker_drain') {
  let handled = 0
  let done
  const finished = new Promise(resolve => { done = resolve })
  // burstWhenReadyExceeds: fetch again at once while the queue has ready jobs (without
  // it pg-boss waits its polling interval between fetches); its fastest drain
  await boss.work(spec.queue,
    { batchSize: spec.batch, localConcurrency: spec.concurrency, pollingIntervalSeconds: 0.5, burstWhenReadyExceeds: 1 },
    async batch => { handled += batch.length; if (handled >= spec.jobs) done() })
  await finished
  // the handlers have run; wait for the last completes to land, as the qcore side does
  for (;;) {
    const { rows } = await boss.getDb().executeSql(
      `SELECT count(*)::int AS n FROM "${spec.schema}".job WHERE name = $1 AND state IN ('created', 'retry', 'active')`,
      [spec.queue])
    if (rows[0].n === 0) break
    await new Promise(resolve => setTimeout(resolve, 2))
  }
  jobs = handled
} else if (spec.scenario === 'claim') {
  // one fetch({ batchSize: spec.batch }) at a time; each call's milliseconds
  const times = []
  for (let i = 0; i < spec.jobs; i++) {
    const t = performance.now()
    const claimed = await boss.fetch(spec.queue, { batchSize: spec.batch })
    times.push(performance.now() - t)
    if (claimed.length !== spec.batch) throw new Error(`claim ${i} got ${claimed.length} jobs`)
  }
  times.sort((a, b) => a - b)
  jobs = times.length
  await finish({ median_ms: times[Math.floor(times.length / 2)], jobs })
} else if (spec.scenario === 'settle') {
  // one complete(queue, ids) at a time, for each batch of ids given; each call's milliseconds
  const times = []
  for (const ids of spec.batches) {
    const t = performance.now()
    const result = await boss.complete(spec.queue, ids)
    times.push(performance.now() - t)
    if (result.affected !== ids.length) throw new Error(`a complete settled ${result.affected} of ${ids.length}`)
  }
  times.sort((a, b) => a - b)
  jobs = times.length
  await finish({ median_ms: times[Math.floor(times.length / 2)], jobs })
} else if (spec.scenario === 'wakeup_latency') {
  // send → handler start, one job in flight, the worker idle before each send; the same
  // protocol as the qcore side (warm-up samples, a pause after each handler start)
  const started = new Map()
  const waiting = new Map()
  await boss.work(spec.queue, { pollingIntervalSeconds: 2 }, async batch => {
    const now = performance.now()
    for (const job of batch) {
      started.set(job.data.i, now)
      waiting.get(job.data.i)?.()
    }
  })
  await new Promise(resolve => setTimeout(resolve, 500))
  const latencies = []
  const sends = []
  const wakes = []
  for (let i = -spec.warmup; i < spec.samples; i++) {
    const arrived = new Promise((resolve, reject) => {
      waiting.set(i, resolve)
      setTimeout(() => reject(new Error(`job ${i} was not handled within 15 s of its send`)), 15000).unref()
    })
    const t0 = performance.now()
    await boss.send(spec.queue, payload(i))
    const t1 = performance.now()
    await arrived
    if (i >= 0) {
      latencies.push(started.get(i) - t0)
      sends.push(t1 - t0)
      wakes.push(started.get(i) - t1)
    }
    await new Promise(resolve => setTimeout(resolve, spec.idle_gap_ms))
  }
  jobs = latencies.length
  await finish({ samples: jobs, latencies_ms: latencies, send_ms: sends, wake_ms: wakes })
} else {
  throw new Error(`pgboss_bench: no pg-boss side for ${spec.scenario}`)
}
const elapsed = (performance.now() - start) / 1000
const cpu = process.cpuUsage(cpu0)
await finish({ elapsed, jobs, client_cpu_s: (cpu.user + cpu.system) / 1e6 })
