import { spawn, type ChildProcess } from 'node:child_process';
import { CommandStartError } from '../local-hosts/command-error.js';
import { hostKey, type SshHostsSettings } from './config.js';
import { redact, remoteShellCommand, sshArgv, type SshTarget } from './ssh-args.js';
import { SshError } from './ssh-error.js';

/** The system `ssh`, found on PATH. */
export const SSH = 'ssh';

/** Spawns `ssh` with an argv, never through a local shell. */
export function spawnSsh(argv: readonly string[], stdin: 'ignore' | 'pipe'): ChildProcess {
  return spawn(SSH, argv, { stdio: [stdin, 'pipe', 'pipe'], windowsHide: true });
}

export interface ScriptResult {
  exitCode: number | null;
  stdout: string;
  /** Redacted. */
  stderr: string;
}

/**
 * Runs one of the blueprint's own scripts on the host (`remote-scripts.ts`) and collects
 * its output. Killed after `timeoutMs`. Rejects when ssh cannot start; an exit code is
 * the caller's to judge.
 */
export function runScript(settings: SshHostsSettings, target: SshTarget, script: string, args: readonly string[], timeoutMs: number): Promise<ScriptResult> {
  const argv = sshArgv(settings, target, ['-n', '-o', 'ControlMaster=no'], remoteShellCommand(script, 'slipway', args));
  return new Promise((resolve, reject) => {
    const child = spawnSsh(argv, 'ignore');
    let stdout = '';
    let stderr = '';
    child.stdout!.setEncoding('utf8').on('data', (c: string) => (stdout += c));
    child.stderr!.setEncoding('utf8').on('data', (c: string) => (stderr += c));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', (error) => {
      clearTimeout(timer);
      if (child.pid === undefined) reject(new CommandStartError(SSH, error));
    });
    child.on('close', (exitCode) => {
      clearTimeout(timer);
      resolve({ exitCode, stdout, stderr: redact(stderr, settings) });
    });
  });
}

/** Runs a script and throws an SshError naming `step` unless it exits 0; returns its stdout. */
export async function runScriptOrThrow(settings: SshHostsSettings, target: SshTarget, step: string, script: string, args: readonly string[], timeoutMs: number): Promise<string> {
  const result = await runScript(settings, target, script, args, timeoutMs);
  if (result.exitCode !== 0) throw new SshError(hostKey(target), step, result.exitCode, result.stderr);
  return result.stdout;
}
