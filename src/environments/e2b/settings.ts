import { z } from 'zod';

/**
 * environment keys of `type: e2b`. Credentials (E2B_API_KEY) and the SDK's endpoints (E2B_DOMAIN, E2B_API_URL,
 * E2B_SANDBOX_URL, E2B_DEBUG) come from the worker's environment only, never from job.yaml.
 */
export const E2BSettingsSchema = z.strictObject({
  /**
   * Templates are named `<template_prefix>-<env key>`: one per environment content in the E2B team, reused by every
   * job of every worker with the same prefix.
   */
  template_prefix: z
    .string()
    .regex(/^[a-z0-9][a-z0-9_-]{0,29}$/, 'lower-case letters, digits, "-" and "_" (at most 30)')
    .default('rollout'),
  /**
   * vCPUs and memory of the template (E2B sets them per template, not per sandbox); else E2B's defaults. E2B's rules
   * (e2b-dev/infra packages/api/internal/team/limits.go:13-80): CPUs 1 or an even count, at most 32
   * (constants/templates.go:5 MaxTemplateCPU); memory at least 128 MiB and even. The team's own maximum (its plan)
   * is E2B's to check.
   */
  cpu_count: z
    .number()
    .int()
    .min(1)
    .max(32, 'at most 32 (E2B MaxTemplateCPU)')
    .refine((cpus) => cpus === 1 || cpus % 2 === 0, 'E2B: CPU count must be 1 or an even number')
    .optional(),
  memory_mb: z
    .number()
    .int()
    .min(128)
    .refine((mb) => mb % 2 === 0, 'E2B: memory must be divisible by 2')
    .optional(),
});
export type E2BSettings = z.infer<typeof E2BSettingsSchema>;
