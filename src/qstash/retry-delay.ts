import { QstashInputError } from "./errors";

/**
 * Upstash-Retry-Delay: an arithmetic expression in milliseconds of `retried` (how many times the
 * message has been retried, 1 before the first retry), with + - * / ^, parentheses, numbers and
 * pow, sqrt, abs, exp, floor, ceil, round, min, max. Parsed once when the message is published
 * (a bad one is a 400 naming the header) and evaluated by the consumer before each retry.
 */
const FUNCTIONS: Record<string, (...args: number[]) => number> = {
  pow: Math.pow,
  sqrt: Math.sqrt,
  abs: Math.abs,
  exp: Math.exp,
  floor: Math.floor,
  ceil: Math.ceil,
  round: Math.round,
  min: Math.min,
  max: Math.max,
};

type Node = { n: number } | { v: "retried" } | { op: string; a: Node; b: Node } | { neg: Node } | { fn: string; args: Node[] };

const TOKEN = /\s*(\d+(?:\.\d+)?|[A-Za-z_]+|[-+*/^(),])/y;

function tokenize(text: string): string[] {
  const tokens: string[] = [];
  TOKEN.lastIndex = 0;
  while (TOKEN.lastIndex < text.length) {
    if (/^\s*$/.test(text.slice(TOKEN.lastIndex))) break;
    const m = TOKEN.exec(text);
    if (!m) throw new Error(`unexpected "${text.slice(TOKEN.lastIndex).trim()[0]}"`);
    tokens.push(m[1]!);
  }
  return tokens;
}

function parse(text: string): Node {
  const tokens = tokenize(text);
  let i = 0;
  const peek = () => tokens[i];
  const take = (want?: string) => {
    const t = tokens[i++];
    if (t === undefined || (want !== undefined && t !== want)) throw new Error(want ? `expected "${want}"` : "unexpected end");
    return t;
  };
  const primary = (): Node => {
    const t = take();
    if (t === "(") {
      const e = sum();
      take(")");
      return e;
    }
    if (t === "-") return { neg: power() };
    if (/^\d/.test(t)) return { n: Number(t) };
    if (t === "retried") return { v: "retried" };
    if (FUNCTIONS[t]) {
      take("(");
      const args = [sum()];
      while (peek() === ",") {
        take(",");
        args.push(sum());
      }
      take(")");
      return { fn: t, args };
    }
    throw new Error(`unknown name "${t}"`);
  };
  const power = (): Node => {
    const base = primary();
    if (peek() === "^") {
      take();
      return { op: "^", a: base, b: power() };
    }
    return base;
  };
  const product = (): Node => {
    let e = power();
    while (peek() === "*" || peek() === "/") e = { op: take(), a: e, b: power() };
    return e;
  };
  const sum = (): Node => {
    let e = product();
    while (peek() === "+" || peek() === "-") e = { op: take(), a: e, b: product() };
    return e;
  };
  const tree = sum();
  if (i !== tokens.length) throw new Error(`unexpected "${tokens[i]}"`);
  return tree;
}

function evaluate(node: Node, retried: number): number {
  if ("n" in node) return node.n;
  if ("v" in node) return retried;
  if ("neg" in node) return -evaluate(node.neg, retried);
  if ("fn" in node) return FUNCTIONS[node.fn]!(...node.args.map((a) => evaluate(a, retried)));
  const a = evaluate(node.a, retried);
  const b = evaluate(node.b, retried);
  return node.op === "+" ? a + b : node.op === "-" ? a - b : node.op === "*" ? a * b : node.op === "/" ? a / b : a ** b;
}

/** Longest delay between two attempts: QStash's own cap, a day. */
export const MAX_RETRY_DELAY_MS = 86_400_000;

/** Checks an expression; a 400 naming the header when it does not parse or evaluate to a number. */
export function checkRetryDelay(expression: string): string {
  if (expression.length > 200) throw new QstashInputError("Upstash-Retry-Delay", "must be at most 200 characters");
  try {
    const value = evaluate(parse(expression), 1);
    if (!Number.isFinite(value)) throw new Error("does not evaluate to a finite number");
  } catch (err) {
    throw new QstashInputError("Upstash-Retry-Delay", `"${expression}" is not a delay expression: ${(err as Error).message}`);
  }
  return expression;
}

/**
 * The delay before retry number `retried` (1 for the first), in ms: the expression's, or
 * QStash's default exponential backoff, min(1 day, e^(2.5·retried) seconds).
 */
export function retryDelayMs(retried: number, expression?: string): number {
  const ms = expression === undefined ? Math.exp(2.5 * retried) * 1_000 : evaluate(parse(expression), retried);
  return Math.round(Math.min(MAX_RETRY_DELAY_MS, Math.max(0, Number.isFinite(ms) ? ms : MAX_RETRY_DELAY_MS)));
}
