/**
 * `rollout serve`'s HTTP surface. Fastify: a maintained, fast server with hooks for auth and a pluggable validator;
 * bodies are validated by zod (the same library as every other edge of Rollout) and the OpenAPI document is built
 * from the very schemas that validate, so it cannot drift from what is enforced.
 */
import { timingSafeEqual } from 'node:crypto';

import Fastify from 'fastify';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';

import { EVAL_PROTOCOL_PATHS, evalProtocolRoutes } from './eval-protocol';
import type { Route } from './route';
import type { InitRequest } from './remote-rollouts';
import { BadInitError, StatusResponseSchema } from './remote-rollouts';
import type { RemoteRollouts } from './remote-rollouts';

const ErrorSchema = z.object({ error: z.string() });
const PUBLIC_PATHS = new Set(['/health', '/openapi.json']);

export interface ServeDeps {
  token: string;
  /**
   * Requests from loopback to the Eval Protocol endpoints need no token: its RemoteRolloutProcessor sends none to
   * /init and sends its Fireworks key to the tracing endpoints.
   */
  evalProtocolLoopbackWithoutToken?: boolean;
  rollouts: RemoteRollouts;
  /** Further routes (sessions), registered the same way. */
  routes?: Route[];
}

export function buildServer(deps: ServeDeps): FastifyInstance {
  // No request logging: /init bodies carry API keys.
  const app = Fastify({ logger: false, bodyLimit: 16 * 1024 * 1024 });
  requireToken(app, deps);
  const routes = serveRoutes(deps);
  for (const route of routes) registerRoute(app, route);
  const openapi = openApiDocument(routes);
  app.get('/openapi.json', () => Promise.resolve(openapi));
  return app;
}

/** Every request but the public paths carries the bearer token. */
function requireToken(app: FastifyInstance, deps: ServeDeps): void {
  const expected = Buffer.from(`Bearer ${deps.token}`);
  app.addHook('onRequest', async (request, reply) => {
    const pathname = request.url.split('?')[0]!;
    if (PUBLIC_PATHS.has(pathname)) return;
    // The socket's own peer address (no proxy headers are trusted): only a process on this host.
    if (deps.evalProtocolLoopbackWithoutToken && EVAL_PROTOCOL_PATHS.has(pathname) && isLoopback(request.ip)) return;
    const given = Buffer.from(request.headers.authorization ?? '');
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
      await reply.code(401).header('www-authenticate', 'Bearer').send({ error: 'missing or wrong bearer token' });
    }
  });
}

/** The remote-rollout routes (Eval Protocol's among them), then the further ones the deps bring. */
function serveRoutes(deps: ServeDeps): Route[] {
  const statusRoute: Route = {
    method: 'GET',
    path: '/status',
    summary: "A rollout's status: 100 finished, 101 running, 13 internal error; 404 for an unknown id",
    query: z.object({ rollout_id: z.string().min(1) }),
    responses: { 200: StatusResponseSchema, 404: ErrorSchema },
    handler: async ({ query }, reply) => {
      const { rollout_id: id } = query as { rollout_id: string };
      return (await deps.rollouts.status(id)) ?? reply.code(404).send({ error: `no rollout "${id}"` });
    },
  };
  return [
    {
      method: 'GET',
      path: '/health',
      summary: 'Liveness (no token needed)',
      responses: { 200: z.object({ ok: z.literal(true) }) },
      handler: () => Promise.resolve({ ok: true }),
    },
    {
      method: 'POST',
      path: '/init',
      summary: "Start one remote rollout (Eval Protocol's contract); idempotent on metadata.rollout_id",
      body: deps.rollouts.initSchema,
      responses: { 200: z.object({ rollout_id: z.string(), trial: z.string() }), 400: ErrorSchema },
      handler: async ({ body }, reply) => {
        try {
          const started = await deps.rollouts.init(body as InitRequest);
          return { rollout_id: started.rolloutId, trial: started.trialName };
        } catch (err) {
          if (err instanceof BadInitError) return reply.code(400).send({ error: err.message });
          throw err;
        }
      },
    },
    statusRoute,
    {
      method: 'GET',
      path: '/rollouts/:id',
      summary: "A finished rollout's result.json and the files of its trial folder (trajectory, logs)",
      params: z.object({ id: z.string().min(1) }),
      responses: { 200: z.object({ result: z.unknown(), files: z.array(z.string()) }), 404: ErrorSchema },
      handler: async ({ params }, reply) => {
        const { id } = params as { id: string };
        const finished = await deps.rollouts.result(id);
        if (!finished) return reply.code(404).send({ error: `no finished rollout "${id}"` });
        return { result: finished.result, files: finished.files };
      },
    },
    ...evalProtocolRoutes(deps.rollouts, statusRoute),
    ...(deps.routes ?? []),
  ];
}

/** A route whose body, query and params are validated by its zod schemas before its handler runs. */
function registerRoute(app: FastifyInstance, route: Route): void {
  app.route({
    method: route.method,
    url: route.path,
    handler: async (request: FastifyRequest, reply: FastifyReply) => {
      const input = { body: request.body, query: request.query, params: request.params };
      for (const part of ['body', 'query', 'params'] as const) {
        const schema = route[part];
        if (!schema) continue;
        const parsed = schema.safeParse(input[part] ?? {});
        if (!parsed.success) {
          // Every problem at once, so a client fixes its request in one pass.
          const problems = parsed.error.issues.map(
            (issue) => `${[part, ...issue.path.map(String)].join('.')}: ${issue.message}`
          );
          return reply.code(400).send({ error: problems.join('; ') });
        }
        input[part] = parsed.data;
      }
      return route.handler(input, reply);
    },
  });
}

function isLoopback(address: string): boolean {
  return /^(127\.|::1$|::ffff:127\.)/.test(address);
}

/** OpenAPI 3.1 from the routes' own zod schemas. */
function openApiDocument(routes: Route[]) {
  const json = (schema: z.ZodType) => z.toJSONSchema(schema, { io: 'input', unrepresentable: 'any' });
  const paths: Record<string, Record<string, unknown>> = {};
  for (const route of routes) {
    const openPath = route.path.replace(/:(\w+)/g, '{$1}');
    const parameters = [
      ...Object.keys(route.query?.shape ?? {}).map((name) => ({
        name,
        in: 'query',
        required: true,
        schema: { type: 'string' },
      })),
      ...Object.keys(route.params?.shape ?? {}).map((name) => ({
        name,
        in: 'path',
        required: true,
        schema: { type: 'string' },
      })),
    ];
    (paths[openPath] ??= {})[route.method.toLowerCase()] = {
      summary: route.summary,
      ...(parameters.length ? { parameters } : {}),
      ...(route.body
        ? { requestBody: { required: true, content: { 'application/json': { schema: json(route.body) } } } }
        : {}),
      responses: Object.fromEntries(
        Object.entries(route.responses).map(([code, schema]) => [
          code,
          { description: code === '200' ? 'OK' : 'Error', content: { 'application/json': { schema: json(schema) } } },
        ])
      ),
      ...(PUBLIC_PATHS.has(route.path) ? { security: [] } : {}),
    };
  }
  return {
    openapi: '3.1.0',
    info: { title: 'Rollout serve', version: '1' },
    components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
    security: [{ bearer: [] }],
    paths,
  };
}
