/**
 * A vendor's reply that what a call reads or removes is not there, read in one shape by every provider: its
 * client.ts says how its vendor says it (`isNotFound`: Docker's and Fly's 404, Kubernetes' 404 ApiException, Daytona's
 * DaytonaNotFoundError, Modal's NotFoundError, E2B's SandboxNotFoundError) and makes its `ifFound` from it here.
 */

/** Whether an error is the vendor's "not there" reply. */
export type NotFoundReply = (err: unknown) => boolean;

/** A call's value, or undefined when the vendor says what it reads or removes is not there; other errors rethrown. */
export type IfFound = <T>(call: Promise<T>) => Promise<T | undefined>;

/** The provider's ifFound, from how its vendor says "not there". */
export function ifFoundBy(isNotFound: NotFoundReply): IfFound {
  return async <T>(call: Promise<T>): Promise<T | undefined> => {
    try {
      return await call;
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  };
}
