import type { TestProject } from "vitest/node";
import { startReceiver } from "./receiver";

declare module "vitest" {
  export interface ProvidedContext {
    receiverUrl: string;
  }
}

/** Starts the loopback receiver the workerd tests send their jobs' requests to. */
export default async function setup(project: TestProject) {
  const { url, server } = await startReceiver();
  project.provide("receiverUrl", url);
  return () => new Promise<void>((resolve) => server.close(() => resolve()));
}
