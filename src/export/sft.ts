/**
 * `--format sft`: one row per trial, `{messages, tools, reward, rewards, metadata}` with OpenAI Chat messages (tool
 * calls included), ready for supervised fine-tuning. The conversation is the agent loop's last model call and its
 * reply, from the gateway's records whatever the dialect the agent spoke; a trial without them (a session) gives the
 * conversation of its ATIF trajectory.
 */
import type { ExportFormat } from './format';
import { trialMetadata } from './format';
import { lastLoopConversation, openAiMessage, readTrajectory, trajectoryConversation } from './sources';
import { TRIAL_FILES } from '../contracts/paths';

export const sftRows: ExportFormat = async function* (trial) {
  let conversation = await lastLoopConversation(trial);
  let source: string = TRIAL_FILES.llmCalls;
  if (!conversation) {
    const trajectory = await readTrajectory(trial);
    if (!trajectory) return;
    conversation = trajectoryConversation(trajectory);
    source = 'agent/trajectory.json';
  }
  const { reward, rewards, ...metadata } = trialMetadata(trial);
  yield `${JSON.stringify({
    messages: conversation.messages.map(openAiMessage),
    tools: conversation.tools,
    reward,
    rewards,
    metadata: { ...metadata, model: conversation.model, usage: trial.result.usage ?? null, source },
  })}\n`;
};
