import { z } from 'zod';

/** A DNS-1123 name (namespaces, service accounts, secrets, runtime classes). */
const kubernetesName = z
  .string()
  .regex(/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/, 'lower-case letters, digits, "-" and "." (a Kubernetes name)')
  .max(253);

/** environment keys of `type: kubernetes` (the cluster itself comes from KUBECONFIG or the in-cluster config). */
export const KubernetesSettingsSchema = z.strictObject({
  namespace: kubernetesName,
  /** A context of the kubeconfig; else its current one. */
  context: z.string().min(1).optional(),
  /** Where images built from a task's Dockerfile are pushed (e.g. registry.example.com/team); pods pull them there. */
  image_registry: z
    .string()
    .regex(/^[^\s/:]+(:\d+)?(\/[a-z0-9._/-]+)?$/, 'a registry host (host[:port][/path]), without a scheme or a tag')
    .optional(),
  runtime_class: kubernetesName.optional(),
  node_selector: z.record(z.string(), z.string()).optional(),
  tolerations: z
    .array(
      z.strictObject({
        key: z.string().optional(),
        operator: z.enum(['Exists', 'Equal']).optional(),
        value: z.string().optional(),
        effect: z.enum(['NoSchedule', 'PreferNoSchedule', 'NoExecute']).optional(),
        toleration_seconds: z.number().int().nonnegative().optional(),
      })
    )
    .optional(),
  service_account: kubernetesName.optional(),
  /** An image pull secret in the namespace, for the registry. */
  pull_secret: kubernetesName.optional(),
});
export type KubernetesSettings = z.infer<typeof KubernetesSettingsSchema>;
export const KUBERNETES_KEYS = Object.keys(KubernetesSettingsSchema.shape) as (keyof KubernetesSettings)[];
