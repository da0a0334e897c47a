/** One HTTP route of `rollout serve`, described for its OpenAPI document and validated by its schemas. */
import type { FastifyReply } from 'fastify';
import type { z } from 'zod';

export interface Route {
  method: 'GET' | 'POST' | 'DELETE';
  path: string;
  summary: string;
  body?: z.ZodType;
  query?: z.ZodObject;
  params?: z.ZodObject;
  responses: Record<number, z.ZodType>;
  handler: (input: { body: unknown; query: unknown; params: unknown }, reply: FastifyReply) => Promise<unknown>;
}
