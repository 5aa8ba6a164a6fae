"""DEBATE-style role-play groups: the group format and golden-group mask (data), the
agents' memory module (agent_memory, prompts), full-dynamics and next-message setups batched across
groups (setups), stance / on-topic classifiers (classify), the human-alignment metrics and the
DeGroot baseline (metrics), next-message SFT with TRL (sft), run directories (experiment), the
demo stage (demo.run_demo). See README.md beside this file."""
