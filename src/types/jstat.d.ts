// jstat ships no types; Rollout uses only the Student t quantile.
declare module 'jstat' {
  export const jStat: { studentt: { inv(p: number, dof: number): number } };
}
