import { MAX_OPEN_CONNECTIONS, type Slots } from "./connections";

/**
 * One invocation's connection slots shared fairly among the tenants of its batch, so that one
 * tenant's slow targets (an attempt may take up to 900 s) cannot hold every slot while another
 * tenant's requests wait (docs/security.md, "Tenants, secrets and targets").
 *
 * Each tenant's requests queue apart. Every tenant announced before the first grant keeps a
 * share of `floor(size / tenants)` slots (at least one) that no other tenant may take while it
 * has a request that does not hold one yet: with up to `size` tenants, a tenant's request waits
 * only while its own tenant holds its share, i.e. behind its own tenant's attempts, never
 * another's. Slots beyond the shares go to whoever waits, so a lone tenant still gets them all.
 * A freed slot goes to the waiting tenant holding the fewest, ties to the one served least
 * recently (round-robin). With more tenants than slots, no tenant gets a second slot while one
 * with a request waiting holds none.
 *
 * Pure scheduling: no I/O, no clock. The consumer announces every request of its batch
 * (`expect`) before any asks, and `forgo`es one that will not ask after all (its request could not
 * be prepared), so that no slot stays kept for it.
 */
export class FairSlots {
  readonly #size: number;
  #free: number;
  #seq = 0;
  readonly #tenants = new Map<string, TenantState>();

  constructor(size = MAX_OPEN_CONNECTIONS) {
    this.#size = size;
    this.#free = size;
  }

  /** A request of `tenant` that will ask for a slot: its tenant's share is kept for it until it does. */
  expect(tenant: string): void {
    this.#state(tenant).expected++;
  }

  /** An announced request that will not ask after all. */
  forgo(tenant: string): void {
    const state = this.#state(tenant);
    if (state.expected > 0) state.expected--;
    this.#pump();
  }

  /** Runs `work` once the scheduler grants `tenant` a slot; the slot is held until `work` settles, whatever it does. */
  async hold<T>(tenant: string, work: () => Promise<T>): Promise<T> {
    const state = this.#state(tenant);
    if (state.expected > 0) state.expected--;
    await new Promise<void>((resolve) => {
      state.waiting.push(resolve);
      this.#pump();
    });
    try {
      return await work();
    } finally {
      state.held--;
      this.#free++;
      this.#pump();
    }
  }

  /** The slots as one tenant's requests see them. */
  of(tenant: string): Slots {
    return { hold: (work) => this.hold(tenant, work), forgo: () => this.forgo(tenant) };
  }

  /** How many slots each tenant holds now (for tests and logs). */
  held(): Map<string, number> {
    return new Map([...this.#tenants].map(([t, s]) => [t, s.held]));
  }

  #state(tenant: string): TenantState {
    let state = this.#tenants.get(tenant);
    if (!state) {
      state = { expected: 0, held: 0, waiting: [], lastServed: 0 };
      this.#tenants.set(tenant, state);
    }
    return state;
  }

  get #share(): number {
    return Math.max(1, Math.floor(this.#size / this.#tenants.size));
  }

  /** Slots a tenant's requests not yet holding one may still claim of its share. */
  #kept(state: TenantState): number {
    return Math.max(0, Math.min(this.#share - state.held, state.expected + state.waiting.length));
  }

  /** Hands free slots out, synchronously: a slot released passes on before any newcomer can ask. */
  #pump(): void {
    while (this.#free > 0) {
      let next: TenantState | undefined;
      for (const state of this.#tenants.values()) {
        if (state.waiting.length === 0) continue;
        if (!next || state.held < next.held || (state.held === next.held && state.lastServed < next.lastServed)) next = state;
      }
      if (!next) return;
      if (next.held >= this.#share) {
        // Beyond its share: only a slot that no other tenant keeps.
        let keptByOthers = 0;
        for (const state of this.#tenants.values()) if (state !== next) keptByOthers += this.#kept(state);
        if (this.#free - 1 < keptByOthers) return;
      }
      next.held++;
      this.#free--;
      next.lastServed = ++this.#seq;
      next.waiting.shift()!();
    }
  }
}

interface TenantState {
  /** Requests announced that have not asked yet. */
  expected: number;
  held: number;
  waiting: Array<() => void>;
  /** When it was last granted a slot (a sequence number; 0: never). */
  lastServed: number;
}
